use lazor::{Device, Tensor, Var};
fn main() {
    let dev = Device::new().unwrap();
    let sizes = [784usize, 1024, 1024, 10];
    let batch = 4096;
    let params: Vec<Var> = sizes
        .windows(2)
        .flat_map(|p| {
            [
                Var::new(Tensor::zeros_on([p[0], p[1]], &dev).contiguous()),
                Var::new(Tensor::zeros_on([p[1]], &dev).contiguous()),
            ]
        })
        .collect();
    let x = Tensor::zeros_on([batch, 784], &dev).contiguous();
    let onehot = Tensor::zeros_on([batch, 10], &dev).contiguous();
    lazor::realize(&[&x, &onehot]).unwrap();
    let mut h = x.clone();
    for (i, layer) in params.chunks(2).enumerate() {
        h = h.matmul(&layer[0]) + &layer[1].tensor();
        if i < 2 {
            h = h.relu();
        }
    }
    let loss = -(h.log_softmax(-1) * &onehot).sum_all() / batch as f32;
    let grads = loss.backward();
    let gs: Vec<Tensor> = params.iter().map(|p| grads[p].clone()).collect();
    let mut all = vec![&loss];
    all.extend(&gs);
    let text = lazor::debug::dot(&all);
    for l in text.lines().filter(|l| l.contains("label=\"kernel")) {
        println!("{l}");
    }
}
