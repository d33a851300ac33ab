//! walbench's integration tests, `walbench reproduce` against real
//! postmasters (run one module with `cargo test -p walbench --test
//! reproduce MODULE::`):
//!
//! - `reproduce`: every experiment on a tiny grid, its JSON, CSV and SVG,
//!   and the usage errors;
//! - `mechanism`: each seed's mechanism counter moves the way the seed
//!   describes.

mod mechanism;
mod reproduce;
