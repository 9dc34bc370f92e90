//! zrecord-engine
