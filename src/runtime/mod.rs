//! The wgpu side: device setup, buffers, pipelines, running a plan and reading results back.

pub mod execute;
pub mod gpu;
pub mod pipelines;
pub mod pool;
pub mod readback;

use crate::graph::{BufferKey, Graph};
use crate::stats::Stats;

/// Everything mutable about a device, behind one lock: realizes on one device run one at a time.
#[derive(Default)]
pub struct State {
    pub graph: Graph,
    pub pool: pool::Pool,
    pub pipelines: pipelines::Pipelines,
    pub stats: Stats,
}

impl State {
    /// Returns freed buffers to the pool.
    pub fn release_all(&mut self, freed: Vec<BufferKey>) {
        for key in freed {
            self.pool.release(key, &mut self.stats);
        }
    }
}
