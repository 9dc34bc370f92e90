//! zsampler
