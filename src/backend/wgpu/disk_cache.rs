//! The pipeline cache on disk (`LAZOR_CACHE_DIR`): what the driver compiled, kept between processes where the
//! adapter has `wgpu::Features::PIPELINE_CACHE`, so a second run of a program skips the driver's compile.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Our file header: magic, then the length and a hash of the driver's data, so a truncated or damaged file is
/// caught here and never reaches the driver.
const MAGIC: &[u8; 8] = b"LZPCACH1";
const HEADER: usize = 8 + 8 + 8;

/// A device's pipeline cache and the file it lives in.
pub struct DiskCache {
    pub cache: wgpu::PipelineCache,
    path: PathBuf,
    /// Set after a failed save, so a read-only directory warns once rather than at every compile.
    failed: AtomicBool,
}

/// FNV-1a, 64 bits: enough to tell a damaged file from a good one.
fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The driver's data in a cache file, or why it cannot be used.
fn parse(file: &[u8]) -> Result<&[u8], &'static str> {
    if file.len() < HEADER || &file[..8] != MAGIC {
        return Err("not a lazor pipeline cache");
    }
    let len = u64::from_le_bytes(file[8..16].try_into().expect("8 bytes"));
    let sum = u64::from_le_bytes(file[16..24].try_into().expect("8 bytes"));
    let data = &file[HEADER..];
    if data.len() as u64 != len || hash(data) != sum {
        return Err("truncated or damaged");
    }
    Ok(data)
}

fn warn(path: &Path, why: impl std::fmt::Display) {
    eprintln!("lazor: pipeline cache {}: {why}; compiling without it", path.display());
}

impl DiskCache {
    /// Opens the cache for `device` from `dir`, or `None` where the device cannot keep one. A file that is damaged,
    /// foreign or unreadable is ignored with one warning, and replaced at the next save.
    pub fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo, dir: Option<PathBuf>) -> Option<DiskCache> {
        if !device.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        let path = dir?.join(format!("{}.bin", wgpu::util::pipeline_cache_key(info)?));
        let file = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                warn(&path, e);
                None
            }
        };
        let data = file.as_deref().and_then(|f| parse(f).map_err(|why| warn(&path, why)).ok());
        let create = |data: Option<&[u8]>| {
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            // SAFETY: `data` is exactly what `get_data` returned for an adapter with this cache key (vendor and
            // device), checked against our length and hash; wgpu checks its own header (driver version, device)
            // and the driver its own, so bytes from another driver are rejected, not run.
            let cache = unsafe {
                device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                    label: Some("lazor"),
                    data,
                    fallback: true,
                })
            };
            (cache, super::gpu::block_on(scope.pop()))
        };
        let cache = match create(data) {
            (cache, None) => cache,
            // Data wgpu refuses even with a fallback (another device's): start empty.
            (_, Some(e)) => {
                warn(&path, e);
                match create(None) {
                    (cache, None) => cache,
                    (_, Some(e)) => {
                        warn(&path, e);
                        return None;
                    }
                }
            }
        };
        Some(DiskCache { cache, path, failed: AtomicBool::new(false) })
    }

    /// Where the cache is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the cache to its file (through a temporary file and a rename, so a reader in another process never
    /// sees half a file). A failure warns once and is otherwise ignored: the cache only saves time.
    pub fn save(&self) {
        if self.failed.load(Ordering::Relaxed) {
            return;
        }
        let Some(data) = self.cache.get_data() else { return };
        let mut file = Vec::with_capacity(HEADER + data.len());
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&(data.len() as u64).to_le_bytes());
        file.extend_from_slice(&hash(&data).to_le_bytes());
        file.extend_from_slice(&data);
        let tmp = self.path.with_extension(format!("tmp{}", std::process::id()));
        let written = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, &file))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            if !self.failed.swap(true, Ordering::Relaxed) {
                eprintln!("lazor: could not save the pipeline cache to {}: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{hash, parse, HEADER, MAGIC};

    fn file(data: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&(data.len() as u64).to_le_bytes());
        f.extend_from_slice(&hash(data).to_le_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn a_good_file_parses_and_damage_is_caught() {
        let good = file(b"driver bytes");
        assert_eq!(parse(&good), Ok(&b"driver bytes"[..]));
        assert!(parse(&good[..good.len() - 1]).is_err(), "truncated");
        let mut flipped = good.clone();
        flipped[HEADER + 3] ^= 1;
        assert!(parse(&flipped).is_err(), "damaged");
        assert!(parse(b"random junk that is long enough").is_err(), "foreign");
        assert!(parse(b"").is_err(), "empty");
    }
}
