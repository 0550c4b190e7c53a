//! Checkpoints: safetensors round trips of every dtype on every backend, files written by hand as other libraries
//! write them, `Module::save`/`load` by parameter name, and every error case (never a panic on bad bytes).

mod common;

use common::devices;
use lazor::half::{bf16, f16};
use lazor::nn::{self, Module};
use lazor::{DType, Device, Error, Tensor};
use std::path::PathBuf;

/// A fresh path in the temporary directory, unique to this process and `name`.
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lazor-{}-{name}.safetensors", std::process::id()))
}

/// A safetensors file of `header` (JSON) and `data`, as the format lays it out.
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn every_dtype_round_trips_on_every_backend() {
    for dev in devices() {
        let path = temp(&format!("dtypes-{}", dev.is_cpu()));
        let f32s = Tensor::from_vec_on(vec![1.5f32, -0.0, f32::INFINITY, 3.25e-7, -2.0, 7.0, 8.0], [7], &dev);
        let f16s = Tensor::from_vec_on(vec![f16::from_f32(0.5), f16::from_f32(-3.0), f16::MAX], [3, 1], &dev);
        let bf16s =
            Tensor::from_vec_on(vec![bf16::from_f32(1e30), bf16::from_f32(-1.25), bf16::MIN_POSITIVE], [3], &dev);
        let i32s = Tensor::from_vec_on(vec![i32::MIN, -1, 0, 1, i32::MAX], [5], &dev);
        let u32s = Tensor::from_vec_on(vec![0u32, 1, u32::MAX], [1, 3], &dev);
        let bools = Tensor::from_vec_on(vec![true, false, true, true, false], [5], &dev);
        let scalar = Tensor::scalar_on(42.0f32, &dev);
        let empty = Tensor::zeros_on([0, 3], &dev);
        // A lazy value is computed by the save's realize.
        let lazy = Tensor::arange_on(6, &dev).reshape([2, 3]) * 2i32;
        let before = dev.stats().realizes;
        lazor::safetensors::save(
            &path,
            &[
                ("f32", &f32s),
                ("f16", &f16s),
                ("bf16", &bf16s),
                ("i32", &i32s),
                ("u32", &u32s),
                ("bool", &bools),
                ("scalar", &scalar),
                ("empty", &empty),
                ("lazy", &lazy),
            ],
        )
        .unwrap();
        assert_eq!(dev.stats().realizes - before, 1, "{}: one read-back for all", dev.name());
        let back = lazor::safetensors::load_on(&path, &dev).unwrap();
        let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
        // The format's order: by dtype, widest alignment first, then by name.
        assert_eq!(names, ["empty", "f32", "scalar", "u32", "i32", "lazy", "bf16", "f16", "bool"]);
        let get = |name: &str| back.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!(
            get("f32").to_vec_as::<f32>().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            f32s.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!((get("f16").dtype(), get("f16").shape()), (DType::F16, &[3, 1][..]));
        assert_eq!(get("f16").to_vec_as::<f16>(), f16s.to_vec_as::<f16>());
        assert_eq!(get("bf16").to_vec_as::<bf16>(), bf16s.to_vec_as::<bf16>());
        assert_eq!(get("i32").to_vec_as::<i32>(), i32s.to_vec_as::<i32>());
        assert_eq!((get("u32").to_vec_as::<u32>(), get("u32").shape()), (vec![0, 1, u32::MAX], &[1, 3][..]));
        assert_eq!(get("bool").to_vec_as::<bool>(), vec![true, false, true, true, false]);
        assert_eq!((get("scalar").shape(), get("scalar").to_vec()), (&[] as &[usize], vec![42.0]));
        assert_eq!((get("empty").shape(), get("empty").numel()), (&[0, 3][..], 0));
        assert_eq!(get("lazy").to_vec_as::<i32>(), vec![0, 2, 4, 6, 8, 10]);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn files_written_as_other_libraries_write_them_load() {
    // As `safetensors.torch.save_file({"w": torch.tensor([[1., 2.], [3., 4.]]), "m": torch.tensor([True, False,
    // True])})` writes it: little-endian values, BOOL one byte each; here with a header padded by spaces and a
    // metadata entry, both of which the format allows.
    let mut data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    data.extend([1u8, 0, 2]); // any nonzero byte is true
    let header = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"m":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}}    "#;
    let path = temp("foreign");
    std::fs::write(&path, file(header, &data)).unwrap();
    for dev in devices() {
        let back = lazor::safetensors::load_on(&path, &dev).unwrap();
        assert_eq!(back[0].0, "w");
        assert_eq!(back[0].1.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(back[1].0, "m");
        assert_eq!(back[1].1.to_vec_as::<bool>(), vec![true, false, true]);
        assert_eq!(
            back[1].1.eq(Tensor::full_on([3], true, &dev)).to_vec_as::<bool>(),
            vec![true, false, true],
            "a true read as true"
        );
    }
    // And what lazor writes, byte for byte.
    let dev = Device::cpu();
    let out = temp("written");
    let w = Tensor::from_vec_on(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2], &dev);
    lazor::safetensors::save(&out, &[("w", &w)]).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(n % 8, 0, "the header is padded to 8 bytes");
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap().trim_end();
    assert_eq!(header, r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#);
    assert_eq!(&bytes[8 + n..], &data[..16]);
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&out).unwrap();
}

#[test]
fn bad_files_are_errors_never_panics() {
    let dev = Device::cpu();
    let good = temp("good");
    let t = Tensor::from_vec_on(vec![1.0f32, 2.0, 3.0], [3], &dev);
    let h = Tensor::from_vec_on(vec![f16::ONE; 5], [5], &dev);
    lazor::safetensors::save(&good, &[("t", &t), ("h", &h)]).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let bad = temp("bad");
    let load = |b: &[u8]| {
        std::fs::write(&bad, b).unwrap();
        lazor::safetensors::load_on(&bad, &dev)
    };
    // Every truncation.
    for cut in 0..bytes.len() {
        let e = load(&bytes[..cut]).err().unwrap_or_else(|| panic!("cut at {cut} loaded"));
        assert!(matches!(e, Error::Corrupt { .. }), "cut at {cut}: {e}");
    }
    // A byte too many.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(load(&longer), Err(Error::Corrupt { .. })));
    // Every byte of the header flipped, one at a time: an error or a valid file, never a panic.
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for i in 0..8 + n {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            let _ = load(&b);
        }
    }
    // Garbage, a huge header length, JSON that is not a header, offsets that do not add up.
    let mut rng = common::Rng::new(5);
    for len in [1usize, 8, 9, 64, 1000] {
        let garbage: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        assert!(matches!(load(&garbage), Err(Error::Corrupt { .. })), "{len} random bytes");
    }
    assert!(matches!(load(&u64::MAX.to_le_bytes()), Err(Error::Corrupt { .. })));
    assert!(matches!(load(&file("[1, 2, 3]", &[])), Err(Error::Corrupt { .. })));
    let gap = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
    assert!(matches!(load(&file(gap, &[0; 12])), Err(Error::Corrupt { .. })));
    let short = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#;
    assert!(matches!(load(&file(short, &[0; 4])), Err(Error::Corrupt { .. })));
    let overflow = r#"{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]}}"#;
    assert!(matches!(load(&file(overflow, &[0; 4])), Err(Error::Corrupt { .. })));
    // A type lazor does not have.
    let f64s = r#"{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#;
    let e = load(&file(f64s, &[0; 8])).unwrap_err();
    assert!(matches!(e, Error::DType { op: "safetensors::load", .. }), "{e}");
    assert!(e.to_string().contains("tensor `a` is F64"), "{e}");
    // No file at all.
    let e = lazor::safetensors::load(temp("absent")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // Nowhere to write.
    let e = lazor::safetensors::save("/nonexistent-dir/x.safetensors", &[("t", &t)]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // One name twice.
    let e = lazor::safetensors::save(&bad, &[("t", &t), ("t", &h)]).unwrap_err();
    assert!(e.to_string().contains("the name `t` is given to two tensors"), "{e}");
    std::fs::remove_file(&good).unwrap();
    std::fs::remove_file(&bad).unwrap();
}

/// A small model: an embedding, a layer norm and two linear layers.
fn model(dev: &Device, seed: u64) -> nn::Sequential {
    nn::Sequential::new(vec![
        Box::new(nn::Embedding::new_on(10, 4, seed, dev)),
        Box::new(nn::LayerNorm::new_on(4, 1e-5, dev)),
        Box::new(nn::Linear::new_on(4, 8, true, seed + 1, dev)),
        Box::new(nn::gelu),
        Box::new(nn::Linear::new_on(8, 3, false, seed + 2, dev)),
    ])
}

#[test]
fn a_module_saves_and_loads_by_parameter_name() {
    for dev in devices() {
        let path = temp(&format!("module-{}", dev.is_cpu()));
        let a = model(&dev, 1);
        // Change the layer norm from its ones and zeros, so loading it means something.
        let (_, ln_w) = &a.parameters()[1];
        ln_w.set(Tensor::from_slice_on(&[0.5f32, 1.5, 2.0, -1.0], [4], &dev));
        a.save(&path).unwrap();
        let b = model(&dev, 7);
        let x = Tensor::from_slice_on(&[3i32, 1, 4, 1, 5], [5], &dev);
        assert_ne!(a.forward(&x).to_vec(), b.forward(&x).to_vec());
        let before = dev.stats().realizes;
        b.load(&path).unwrap();
        assert_eq!(dev.stats().realizes - before, 1, "{}: one upload for every parameter", dev.name());
        for ((na, va), (nb, vb)) in a.parameters().iter().zip(b.parameters()) {
            assert_eq!(na, &nb);
            assert_eq!(va.to_vec(), vb.to_vec(), "{na}");
        }
        assert_eq!(a.forward(&x).to_vec(), b.forward(&x).to_vec());
        // The loaded values are the Vars' own: training goes on from them.
        let grads = b.forward(&x).sum_all().backward();
        assert_eq!(grads.len(), 6);
        // The file holds the parameters under their names, for PyTorch's load_state_dict.
        let names: Vec<String> = lazor::safetensors::load(&path).unwrap().into_iter().map(|(n, _)| n).collect();
        let mut want = ["0.weight", "1.weight", "1.bias", "2.weight", "2.bias", "4.weight"].map(String::from).to_vec();
        let mut got = names.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn loading_reports_a_missing_unexpected_or_mismatched_tensor_and_changes_nothing() {
    let dev = Device::cpu();
    let path = temp("mismatch");
    let with_bias = nn::Linear::new_on(3, 2, true, 1, &dev);
    let without = nn::Linear::new_on(3, 2, false, 2, &dev);
    let before = without.weight.to_vec();

    without.save(&path).unwrap();
    let e = with_bias.load(&path).unwrap_err();
    assert!(matches!(&e, Error::MissingTensor { name, .. } if name == "bias"), "{e}");
    assert!(e.to_string().contains("no tensor named `bias`"), "{e}");

    with_bias.save(&path).unwrap();
    let e = without.load(&path).unwrap_err();
    assert!(matches!(&e, Error::UnexpectedTensor { name, .. } if name == "bias"), "{e}");
    assert_eq!(without.weight.to_vec(), before, "a failed load changes nothing");

    let wider = nn::Linear::new_on(4, 2, true, 3, &dev);
    let e = wider.load(&path).unwrap_err();
    assert!(matches!(&e, Error::TensorMismatch { name, .. } if name == "weight"), "{e}");
    assert!(e.to_string().contains("tensor `weight` is f32 [2, 3], but its parameter is f32 [2, 4]"), "{e}");

    let w16 = with_bias.weight.to_dtype(DType::F16);
    let b = with_bias.bias.as_ref().unwrap();
    lazor::safetensors::save(&path, &[("weight", &w16), ("bias", b)]).unwrap();
    let e = with_bias.load(&path).unwrap_err();
    assert!(e.to_string().contains("tensor `weight` is f16 [2, 3], but its parameter is f32 [2, 3]"), "{e}");

    std::fs::write(&path, b"not a checkpoint").unwrap();
    assert!(matches!(with_bias.load(&path), Err(Error::Corrupt { .. })));
    std::fs::remove_file(&path).unwrap();
}
