//! The host clock: std's `Instant` on native targets; in the browser, where std's panics, the same type over the
//! page's `performance.now()`.

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use std::time::Instant;
#[cfg(target_arch = "wasm32")]
pub(crate) use web_time::Instant;
