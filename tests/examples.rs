//! The training examples, run for a few steps on every backend (CI: the CPU backend and lavapipe) on their
//! synthetic data, as issue 23 asks: the loss goes down and each step is one realize. Also the pieces of
//! `train_mlp`'s check against PyTorch that need no PyTorch: the dump, the comparison, the IDX files and the plot.

mod common;

#[path = "../examples/train_mlp.rs"]
#[allow(dead_code)]
mod train_mlp;

use common::devices;
use lazor::nn::Module;
use std::path::{Path, PathBuf};
use train_mlp::{compare, read_idx, train, Data, Options, BATCH, PIXELS};

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `train_mlp --steps 20` on the synthetic set, quietly, with nothing written unless `with` says.
fn quick(with: impl FnOnce(&mut Options)) -> Options {
    let mut opts = Options { steps: Some(20), plot: None, quiet: true, ..Options::default() };
    with(&mut opts);
    opts
}

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

#[test]
fn train_mlp_learns_on_every_backend_one_realize_a_step() {
    let data = Data::synthetic(0);
    let opts = quick(|_| {});
    for dev in devices() {
        let report = train(&opts, &data, &dev).unwrap();
        let l = &report.losses;
        assert_eq!(l.len(), 20, "{}", dev.name());
        assert!(l.iter().all(|v| v.is_finite()), "{}: {l:?}", dev.name());
        assert!(mean(&l[15..]) < 0.5 * mean(&l[..5]), "{}: the loss did not go down: {l:?}", dev.name());
        // One realize a step; the losses are read back ten at a time.
        assert_eq!(report.step_realizes, 20 + 2, "{}", dev.name());
        assert_eq!(report.accuracies.len(), 1);
        println!("{}: loss {:.3} -> {:.3}, accuracy {:.3}", dev.name(), l[0], l[19], report.accuracies[0]);
        // Batches uploaded from the host instead of index_select'ed on the device: the same losses.
        let host = train(&Options { host_batches: true, ..opts.clone() }, &data, &dev).unwrap();
        for (a, b) in l.iter().zip(&host.losses) {
            assert!((a - b).abs() <= 1e-5 * b.abs(), "{}: {l:?} and {:?}", dev.name(), host.losses);
        }
        assert_eq!(host.step_realizes, 20 + 2, "{}", dev.name());
    }
}

#[test]
fn train_mlp_learns_in_mixed_precision_one_realize_a_step() {
    let data = Data::synthetic(0);
    for amp in [lazor::DType::BF16, lazor::DType::F16] {
        let opts = quick(|o| o.amp = Some(amp));
        for dev in devices() {
            let report = train(&opts, &data, &dev).unwrap();
            let l = &report.losses;
            assert!(l.iter().all(|v| v.is_finite()), "{} {amp}: {l:?}", dev.name());
            assert!(mean(&l[15..]) < 0.5 * mean(&l[..5]), "{} {amp}: the loss did not go down: {l:?}", dev.name());
            // f16's scaler checks and skips on the device: still one realize a step.
            assert_eq!(report.step_realizes, 20 + 2, "{} {amp}", dev.name());
            println!("{} {amp}: loss {:.3} -> {:.3}", dev.name(), l[0], l[19]);
        }
    }
}

#[test]
fn train_mlp_dump_compare_and_plot() {
    let dir = scratch("train_mlp_dump");
    let data = Data::synthetic(0);
    let plot = dir.join("loss.svg");
    let opts = quick(|o| {
        o.steps = Some(12);
        o.dump = Some(dir.clone());
        o.plot = Some(plot.clone());
        o.save = Some(dir.join("trained.safetensors"));
    });
    let dev = lazor::Device::cpu();
    let report = train(&opts, &data, &dev).unwrap();
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));

    // Every step's batch, in step order, and the settings PyTorch needs.
    let (dims, images) = read_idx(&dir.join("batches-images-idx3-ubyte")).unwrap();
    assert_eq!(dims, [12 * BATCH, 28, 28]);
    let (dims, labels) = read_idx(&dir.join("batches-labels-idx1-ubyte")).unwrap();
    assert_eq!(dims, [12 * BATCH]);
    let first = data.train.images.chunks(PIXELS).position(|im| im == &images[..PIXELS]).unwrap();
    assert_eq!(labels[0], data.train.labels[first]);
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    assert!(config.contains("\"steps\": 12") && config.contains("\"lrs\": [0.0010000000474974513, "), "{config}");

    // The trained weights are the final ones of the dump, and start from the initial ones.
    let model = train_mlp::mlp(0, &dev);
    model.load(dir.join("init.safetensors")).unwrap();
    let init = model.vars()[0].to_vec();
    model.load(dir.join("trained.safetensors")).unwrap();
    assert_ne!(model.vars()[0].to_vec(), init);

    // The comparison: lazor against itself agrees; a loss off by 1% or a weight off by 0.01 does not.
    assert!(compare(&dir).is_err(), "no PyTorch files yet");
    std::fs::copy(dir.join("lazor_final.safetensors"), dir.join("torch_final.safetensors")).unwrap();
    let losses: Vec<String> = report.losses.iter().map(|l| format!("{l:e}")).collect();
    std::fs::write(dir.join("torch_losses.txt"), losses.join("\n")).unwrap();
    compare(&dir).unwrap();
    let mut off = losses.clone();
    off[5] = format!("{:e}", report.losses[5] * 1.01);
    std::fs::write(dir.join("torch_losses.txt"), off.join("\n")).unwrap();
    assert!(compare(&dir).unwrap_err().contains("step 6"));
    std::fs::write(dir.join("torch_losses.txt"), losses.join("\n")).unwrap();
    let params = model.parameters();
    let bumped = &*params[3].1 + 0.01;
    let mut named: Vec<(&str, &lazor::Tensor)> = params.iter().map(|(n, v)| (n.as_str(), &**v)).collect();
    named[3].1 = &bumped;
    lazor::safetensors::save(dir.join("torch_final.safetensors"), &named).unwrap();
    assert!(compare(&dir).unwrap_err().contains(&params[3].0));
}

#[test]
fn train_mlp_dump_in_mixed_precision_is_compared_within_1e_2() {
    let dir = scratch("train_mlp_dump_amp");
    let data = Data::synthetic(0);
    let opts = quick(|o| {
        o.steps = Some(4);
        o.dump = Some(dir.clone());
        o.amp = Some(lazor::DType::BF16);
    });
    let report = train(&opts, &data, &lazor::Device::cpu()).unwrap();
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    assert!(config.contains("\"amp\": \"bf16\""), "{config}");
    std::fs::copy(dir.join("lazor_final.safetensors"), dir.join("torch_final.safetensors")).unwrap();
    // Half a percent off: within bf16's tolerance, 2% off beyond it.
    for (factor, agrees) in [(1.005, true), (1.02, false)] {
        let off: Vec<String> = report.losses.iter().map(|l| format!("{:e}", l * factor)).collect();
        std::fs::write(dir.join("torch_losses.txt"), off.join("\n")).unwrap();
        assert_eq!(compare(&dir).is_ok(), agrees, "losses {factor} times lazor's");
    }
}

#[test]
fn train_mlp_reads_idx_files_gzipped_or_not() {
    use std::io::Write;
    let dir = scratch("train_mlp_idx");
    // Fashion-MNIST's layout with 3 training and 2 test images; the training files gzipped, the test files not.
    let image: Vec<u8> = (0..PIXELS).map(|i| (i % 251) as u8).collect();
    let write = |name: &str, dims: &[usize], data: &[u8]| train_mlp::write_idx(&dir.join(name), dims, data).unwrap();
    write("t10k-images-idx3-ubyte", &[2, 28, 28], &image.repeat(2));
    write("t10k-labels-idx1-ubyte", &[2], &[4, 9]);
    for (name, dims, data) in [
        ("train-images-idx3-ubyte", vec![3, 28, 28], image.repeat(3)),
        ("train-labels-idx1-ubyte", vec![3], vec![0, 1, 2]),
    ] {
        write(name, &dims, &data);
        let raw = std::fs::read(dir.join(name)).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        std::fs::write(dir.join(format!("{name}.gz")), gz.finish().unwrap()).unwrap();
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    let data = Data::fashion_mnist(&dir).unwrap().expect("all four files are there");
    assert!(!data.synthetic);
    assert_eq!((data.train.len(), data.test.len()), (3, 2));
    assert_eq!(data.train.labels, [0, 1, 2]);
    assert_eq!(&data.test.images[PIXELS..], &image[..]);

    // A missing file: no data (the example falls back to the synthetic set); a damaged one: an error.
    std::fs::remove_file(dir.join("t10k-labels-idx1-ubyte")).unwrap();
    assert!(Data::fashion_mnist(&dir).unwrap().is_none());
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), [0, 0, 8, 1, 0, 0, 0, 5, 1]).unwrap();
    assert!(Data::fashion_mnist(&dir).unwrap_err().contains("t10k-labels"));
}

#[test]
fn train_mlp_command_line() {
    let parse = |args: &[&str]| Options::parse(args.iter().map(|a| a.to_string()));
    let o = parse(&[
        "data",
        "--epochs",
        "2",
        "--steps",
        "20",
        "--backend",
        "cpu",
        "--no-plot",
        "--dump",
        "d",
        "--host-batches",
        "--amp",
        "bf16",
    ])
    .unwrap();
    assert!(o.host_batches);
    assert_eq!(o.amp, Some(lazor::DType::BF16));
    assert_eq!(parse(&["--amp", "f16"]).unwrap().amp, Some(lazor::DType::F16));
    assert!(parse(&["--amp", "f32"]).unwrap_err().contains("--amp is bf16 or f16"));
    assert!(o.device().unwrap().is_cpu());
    assert_eq!((o.data, o.epochs, o.steps, o.plot, o.dump), ("data".into(), 2, Some(20), None, Some("d".into())));
    let o = parse(&[]).unwrap();
    assert_eq!((o.data, o.epochs, o.steps), (train_mlp::DEFAULT_DATA.into(), 5, None));
    assert!(parse(&["--steps"]).unwrap_err().contains("--steps needs a value"));
    assert!(parse(&["--steps", "x"]).is_err() && parse(&["--fast"]).unwrap_err().contains("unknown flag --fast"));
    assert!(parse(&["--backend", "tpu"]).unwrap().device().is_err());
}

/// `train_gpt` for a few steps of a tiny transformer, on the CPU backend and on wgpu: it trains, evaluates and
/// samples without failing. The binary is the one `cargo test` builds beside this test.
#[test]
fn train_gpt_runs_a_few_steps_on_every_backend() {
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe.parent().and_then(|d| d.parent()).expect("the target directory");
    let bin = dir.join("examples").join(format!("train_gpt{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} was not built (cargo test builds examples)", bin.display());
    for backend in ["cpu", "vulkan"] {
        for amp in [None, Some("bf16"), Some("f16")] {
            let args = ["--steps", "4", "--layers", "1", "--heads", "2", "--width", "16", "--context", "16"];
            let out = std::process::Command::new(&bin)
                .args(args)
                .args(["--batch", "4", "--eval-every", "2", "--sample", "8"])
                .args(amp.map(|a| ["--amp", a]).iter().flatten())
                .env("LAZOR_BACKEND", backend)
                .output()
                .expect("train_gpt runs");
            let text = String::from_utf8_lossy(&out.stdout);
            let what = format!("train_gpt on {backend}, --amp {amp:?}");
            assert!(out.status.success(), "{what}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
            assert!(text.contains("validation loss") && text.contains("loss went from"), "{what}: {text}");
            // Under f16 the progress lines show the loss scale.
            assert_eq!(text.contains(", loss scale "), amp == Some("f16"), "{what}: {text}");
        }
    }
}
