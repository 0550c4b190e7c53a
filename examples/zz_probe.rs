use lazor::half::bf16;
fn main() {
    let d = lazor::Device::new().unwrap();
    let a = lazor::Tensor::from_vec_on(vec![bf16::from_f32(1.0); 64 * 64], [64, 64], &d);
    a.matmul(&a).realize().unwrap();
}
