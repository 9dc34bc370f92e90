//! Fuzzes operation sequences (appends, paired appends, deletes, compactions,
//! syncs) against an in-memory model, with a power cut at an input-chosen
//! I/O call: the crash image must open to the last durable state or a later
//! committed one, bit-exact.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zrecord_engine::fuzzing::store_ops(data);
});
