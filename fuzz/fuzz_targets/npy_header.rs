//! Fuzzes the `.npy` header parser and the reader-based full read: no input
//! may panic or allocate beyond what the bytes justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = zrecord::npy::NpyHeader::parse(data);
    let _ = zrecord::npy::read_from(data);
});
