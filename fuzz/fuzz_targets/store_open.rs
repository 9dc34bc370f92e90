//! Fuzzes opening a store from arbitrary file contents (meta.zr, store.zr,
//! dict.zr, intent.zr, loc segments, chunks), then gathering and verifying:
//! no input may panic or allocate beyond what the bytes justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = zrecord_engine::fuzzing::store_open(data);
});
