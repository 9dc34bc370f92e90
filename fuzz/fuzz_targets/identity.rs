//! Fuzzes the decoder of a store's type identity (`store.zr`'s MessagePack
//! map): no input may panic, and whatever decodes must survive a round trip
//! through the encoder unchanged (what a store writes is what it reads).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zrecord::dtype::fuzz_identity(data);
});
