//! The pipeline cache on disk (`LAZOR_CACHE_DIR`): written after compiles, read by the next device, and a damaged,
//! truncated or foreign file is ignored (one warning) without a crash or a wrong answer. One test in its own
//! binary, because it sets the environment before opening devices.

mod common;

use lazor::{Device, Tensor};
use std::path::Path;

/// lazor's file header: magic, data length, FNV-1a hash of the data.
const HEADER: usize = 24;

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

fn valid(path: &Path) -> bool {
    let Ok(f) = std::fs::read(path) else { return false };
    f.len() > HEADER
        && &f[..8] == b"LZPCACH1"
        && u64::from_le_bytes(f[8..16].try_into().unwrap()) == (f.len() - HEADER) as u64
        && u64::from_le_bytes(f[16..24].try_into().unwrap()) == fnv(&f[HEADER..])
}

/// Opens a fresh wgpu device, computes an expression (compiling its pipeline) and checks the answer.
fn compute_on_a_fresh_device() -> Option<Device> {
    let dev = common::gpu_devices().into_iter().next()?;
    let x = Tensor::from_vec_on(vec![0.0, 1.0, 2.0], [3], &dev);
    let got = ((&x * 2.0).exp() - 1.0).to_vec();
    let want: Vec<f32> = [0.0f32, 1.0, 2.0].iter().map(|v| (v * 2.0).exp() - 1.0).collect();
    common::assert_close(&got, &want, 1e-5, 1e-6, "after opening the cache");
    assert_eq!(dev.stats().pipelines_compiled, 1);
    Some(dev)
}

#[test]
fn the_pipeline_cache_survives_processes_and_bad_files() {
    let dir = std::env::temp_dir().join(format!("lazor-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("LAZOR_CACHE_DIR", &dir);

    let Some(dev) = compute_on_a_fresh_device() else {
        // No wgpu backend asked for (LAZOR_TEST_BACKENDS=cpu): the CPU backend compiles nothing.
        assert!(Device::cpu().wgpu().is_none());
        return;
    };
    if !dev.backend().eq_ignore_ascii_case("vulkan") {
        assert!(
            dev.wgpu().and_then(|g| g.pipeline_cache_file()).is_none(),
            "only Vulkan has PIPELINE_CACHE in wgpu 30"
        );
        return;
    }
    let path = dev.wgpu().and_then(|g| g.pipeline_cache_file()).expect("a Vulkan device keeps a pipeline cache");
    assert!(path.starts_with(&dir), "{} is under LAZOR_CACHE_DIR", path.display());
    assert!(valid(&path), "the compile was saved: {}", path.display());
    drop(dev);

    // A second device (as a second process would) reads it and keeps it valid.
    compute_on_a_fresh_device().expect("the device opens again");
    assert!(valid(&path));

    // Junk, a truncated file, and a well-formed file from another device: each is ignored and replaced.
    let good = std::fs::read(&path).unwrap();
    let mut foreign = good.clone();
    foreign[HEADER + 17] ^= 0xff; // the first byte of wgpu's adapter key (vendor and device)
    let sum = fnv(&foreign[HEADER..]);
    foreign[16..24].copy_from_slice(&sum.to_le_bytes());
    for (what, bytes) in
        [("junk", b"not a cache at all".to_vec()), ("truncated", good[..good.len() - 7].to_vec()), ("foreign", foreign)]
    {
        std::fs::write(&path, &bytes).unwrap();
        let dev = compute_on_a_fresh_device().expect("the device opens");
        dev.synchronize().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(valid(&path), "{what}: the file was replaced by a good one");
    }

    // Set and empty: no disk cache.
    std::env::set_var("LAZOR_CACHE_DIR", "");
    let dev = compute_on_a_fresh_device().unwrap();
    assert!(dev.wgpu().and_then(|g| g.pipeline_cache_file()).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
