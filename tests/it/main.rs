//! The integration tests, one binary with a module per area: every module links the
//! whole crate, and one link is cheaper than twelve. Run one area with
//! `cargo test --test it AREA::` (for example `matrix::`); the tests that need
//! something outside the repository (a llama.cpp server, Chromium) are ignored unless
//! asked for with `-- --ignored`.

mod adapters;
mod chaos;
mod common;
mod engines;
mod examples;
mod fleet;
mod fuzz;
mod gateways;
mod html;
mod incident;
mod interrupt;
mod leak_rate;
mod matrix;
mod merge;
mod modules;
mod policy;
mod provenance;
mod run;
mod side_channels;
mod transparency;
