//! zrecord
