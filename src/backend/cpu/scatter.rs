//! Slice writes on the CPU ([`Kernel::scatter`]): the kernel's values and their places computed over the slice,
//! then stored at those places in the buffer, whose other elements stay as they are.

use super::{map, CpuState, Job};
use crate::backend::Data;
use crate::buffer::BufferKey;
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::profile::Stats;
use std::sync::Arc;

/// Runs scatter kernel `k` of `job`: into the buffer its output slot already has (`keys`), or the buffer of the
/// input it is stored into (a [`Data::Alias`], taken over), or a new one (pushed on `created`).
pub(super) fn run(
    st: &mut CpuState,
    k: &Kernel,
    job: &Job,
    keys: &mut [Option<BufferKey>],
    created: &mut Vec<BufferKey>,
    stats: &mut Stats,
) -> Result<()> {
    let slot = k.outputs[0].0;
    let key = match (keys[slot], &job.buffers[slot].data) {
        (Some(key), _) => key,
        (None, Data::Alias(input)) => keys[*input].take().expect("an input stored into exists"),
        (None, _) => {
            let whole = st.alloc((job.buffers[slot].bytes / 4) as usize, stats)?;
            let key = st.insert(whole, stats);
            created.push(key);
            key
        }
    };
    keys[slot] = Some(key);
    let (values, at) = {
        let inputs: Vec<&[f32]> =
            k.inputs.iter().map(|&(s, _)| st.buffers[keys[s].expect("inputs are written first")].as_slice()).collect();
        eval(k, &inputs)
    };
    // A read-back still sharing the buffer keeps the old values: the write goes to a copy.
    place(k.out_types[0], &values, &at, Arc::make_mut(&mut st.buffers[key]).as_mut_slice());
    Ok(())
}

/// The kernel's value at each element of its shape, stored as its output's type, and the element index each goes
/// to.
fn eval(k: &Kernel, inputs: &[&[f32]]) -> (Vec<f32>, Vec<f32>) {
    let numel = k.shape.numel();
    let dt = k.out_types[0];
    let mut values = vec![0.0f32; (dt.bytes(numel) / 4) as usize];
    let mut at = vec![0.0f32; numel];
    let to = k.scatter.expect("a scatter kernel");
    let mut outs: [&mut [f32]; 2] = [&mut values, &mut at];
    map::map(k, 0..k.body.len(), inputs, &[k.outputs[0].1, to], &[dt, DType::I32], &mut outs, None);
    (values, at)
}

/// Stores element `j` of `values` (elements of `dt` as buffers hold them) at element `at[j]` (an `i32`'s bits) of
/// `dst`.
fn place(dt: DType, values: &[f32], at: &[f32], dst: &mut [f32]) {
    let to = at.iter().map(|a| a.to_bits() as usize);
    match dt.size_in_bytes() {
        4 => to.zip(values).for_each(|(t, &v)| dst[t] = v),
        2 => {
            let (src, dst): (&[u16], &mut [u16]) = (bytemuck::cast_slice(values), bytemuck::cast_slice_mut(dst));
            to.zip(src).for_each(|(t, &v)| dst[t] = v);
        }
        _ => {
            let (src, dst): (&[u8], &mut [u8]) = (bytemuck::cast_slice(values), bytemuck::cast_slice_mut(dst));
            to.zip(src).for_each(|(t, &v)| dst[t] = v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_land_at_their_places_in_every_width() {
        let mut dst = vec![0.0f32; 4];
        let at: Vec<f32> = [3u32, 0].iter().map(|&i| f32::from_bits(i)).collect();
        place(DType::F32, &[1.0, 2.0], &at, &mut dst);
        assert_eq!(dst, [2.0, 0.0, 0.0, 1.0]);
        // Halves: elements 5 and 2 of 8, two to a word.
        let mut dst = vec![0.0f32; 4];
        let halves: [u16; 2] = [0x1111, 0x2222];
        let at: Vec<f32> = [5u32, 2].iter().map(|&i| f32::from_bits(i)).collect();
        place(DType::F16, bytemuck::cast_slice(&[u32::from(halves[0]) | u32::from(halves[1]) << 16]), &at, &mut dst);
        let words: &[u32] = bytemuck::cast_slice(&dst);
        assert_eq!(words, [0, 0x2222, 0x1111 << 16, 0]);
    }
}
