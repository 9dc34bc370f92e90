//! loaderx
