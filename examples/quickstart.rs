//! The quickstart: lazy tensor math, one fused kernel, one submit. Run with `cargo run --example quickstart`.

use lazor::{Device, Tensor};

fn main() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0], [3]); // broadcasts against [2, 3]
    let c = (a.clone() + &b) * 5.0; // lazy: builds graph nodes, no GPU work yet
    let d = 1.0 - &c / 2.0; // scalars on either side
    assert_eq!(c.shape(), &[2, 3]);
    let v: Vec<f32> = d.to_vec(); // realize + read back
    println!("d = {v:?}");

    let expected: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
        .iter()
        .zip([10.0f32, 20.0, 30.0].iter().cycle())
        .map(|(x, y)| 1.0 - (x + y) * 5.0 / 2.0)
        .collect();
    assert_eq!(v, expected);

    // More math, fused into one kernel per realize.
    let x = Tensor::from_vec((0..8).map(|i| i as f32 - 4.0).collect(), [8]);
    let y = (x.sigmoid() * &x).maximum(&x.tanh()).clamp(-1.0, 2.5);
    println!("y = {:?}", y.to_vec());

    // Views are index math: the transpose, the slice and the concatenation are read in place, in one kernel.
    let m = Tensor::from_vec((0..6).map(|i| i as f32).collect(), [2, 3]);
    let before = Device::default().stats().dispatches;
    let z = (Tensor::cat(&[&m.t(), &m.t().narrow(0, 0, 1)], 0) * 10.0).relu();
    println!("z = {:?} (shape {:?})", z.to_vec(), z.shape());
    assert_eq!(z.to_vec()[..6], [0.0, 30.0, 10.0, 40.0, 20.0, 50.0]);
    assert_eq!(Device::default().stats().dispatches - before, 1);

    let dev = Device::default();
    let s = dev.stats();
    println!(
        "device: {}; {} realizes, {} submits, {} dispatches, {} pipelines compiled",
        dev.name(),
        s.realizes,
        s.submits,
        s.dispatches,
        s.pipelines_compiled
    );
}
