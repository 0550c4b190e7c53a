//! The per-device pipeline cache, keyed on generated WGSL (which encodes a kernel's structure and nothing else).

use super::disk_cache::DiskCache;
use super::gpu::Scopes;
use crate::backend::wgpu::codegen::Target;
use crate::error::{Error, Result};
use crate::hash::FastMap;
use crate::profile::Stats;
use std::sync::Arc;

/// A compiled kernel and the layout its bind groups use, fetched once rather than per dispatch.
#[derive(Debug)]
pub struct Compiled {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Whether it was compiled from SPIR-V lazor wrote ([`super::spirv`]) rather than from WGSL by wgpu.
    pub spirv: bool,
}

/// Each dispatch's pipeline, in the order a job's dispatches run.
pub type Dispatches = Arc<[Arc<Compiled>]>;

/// More plan families than a device keeps plans (`schedule::cache::MAX_PLANS`), so a working set of plans stays.
const MAX_FAMILIES: usize = 1024;

/// Compiled compute pipelines by source, and by kernel structure in front of that, so a kernel seen before skips
/// code generation as well as compilation.
#[derive(Default)]
pub struct Pipelines {
    cache: FastMap<String, Arc<Compiled>>,
    /// By the structure of the kernels a dispatch runs (one, or several joined: `Kernel::joins`).
    by_key: FastMap<Vec<crate::backend::wgpu::codegen::Key>, Arc<Compiled>>,
    /// Each dispatch's pipeline, in order, by the plan family of the job ([`crate::schedule::Plan::family`]): a
    /// reused plan (a decode step, a training step) skips building every kernel's key and looking it up. Kept with
    /// the target they were generated for, which can change at run time (`set_subgroups`).
    families: FastMap<u64, (Target, Dispatches)>,
    /// The driver's cache, kept on disk between processes, where the device has one.
    pub disk: Option<DiskCache>,
}

impl Pipelines {
    /// The pipeline of a dispatch whose kernels' structure is `key`, if one was compiled; counted as a cache hit.
    pub fn lookup(&self, key: &[crate::backend::wgpu::codegen::Key], stats: &mut Stats) -> Option<Arc<Compiled>> {
        let p = self.by_key.get(key)?;
        stats.pipeline_cache_hits += 1;
        Some(p.clone())
    }

    /// The pipelines of the `dispatches` dispatches of a job of plan family `family`, if a job of that family ran;
    /// counted as cache hits.
    pub fn family(&self, family: u64, target: &Target, dispatches: usize, stats: &mut Stats) -> Option<Dispatches> {
        let (_, found) = self.families.get(&family).filter(|(t, c)| t == target && c.len() == dispatches)?;
        stats.pipeline_cache_hits += dispatches as u64;
        stats.pipeline_family_hits += dispatches as u64;
        Some(found.clone())
    }

    /// Remembers `compiled` as the pipelines of plan family `family`.
    pub fn remember_family(&mut self, family: u64, target: Target, compiled: Dispatches) {
        // Families of plans the plan cache let go are never asked for again: start over past a bound.
        if self.families.len() >= MAX_FAMILIES {
            self.families.clear();
        }
        self.families.insert(family, (target, compiled));
    }

    /// Writes the driver's cache to disk, where there is one.
    pub fn save(&self) {
        if let Some(d) = &self.disk {
            d.save();
        }
    }

    /// Remembers `compiled` as the pipeline of structure `key`.
    pub fn remember(&mut self, key: Vec<crate::backend::wgpu::codegen::Key>, compiled: Arc<Compiled>) {
        self.by_key.insert(key, compiled);
    }

    /// The pipeline for `wgsl`, compiled on first use.
    ///
    /// # Errors
    /// [`Error::KernelCompile`] when wgpu rejects the shader or pipeline; the failure is not cached.
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        wgsl: &str,
        name: &str,
        trusted: bool,
        debug: u32,
        stats: &mut Stats,
    ) -> Result<Arc<Compiled>> {
        if let Some(p) = self.cache.get(wgsl) {
            stats.pipeline_cache_hits += 1;
            return Ok(p.clone());
        }
        if debug >= 2 {
            eprintln!("lazor: compiling kernel {name}:\n{wgsl}");
        }
        let scopes = Scopes::push(device);
        let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(wgsl.into()) };
        let module = if trusted {
            // SAFETY: the caller vouches that every index the kernel computes is in range (see its call site), so
            // dropping wgpu's runtime bounds checks cannot let the shader touch memory outside its bindings.
            unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
        } else {
            device.create_shader_module(desc)
        };
        let pipeline = self.pipeline(device, name, &module, None);
        scopes.pop().map_err(|e| Error::KernelCompile { kernel: name.to_string(), message: e.to_string() })?;
        stats.pipelines_compiled += 1;
        let layout = pipeline.get_bind_group_layout(0);
        let compiled = Arc::new(Compiled { pipeline, layout, spirv: false });
        self.cache.insert(wgsl.to_string(), compiled.clone());
        Ok(compiled)
    }

    /// A compute pipeline of `module`'s `main`, through the driver's disk cache where there is one; `layout` as
    /// given, or derived by wgpu from the module's bindings (WGSL only).
    fn pipeline(
        &self,
        device: &wgpu::Device,
        name: &str,
        module: &wgpu::ShaderModule,
        layout: Option<&wgpu::PipelineLayout>,
    ) -> wgpu::ComputePipeline {
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout,
            module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: self.disk.as_ref().map(|d| &d.cache),
        })
    }

    /// The pipeline for `wgsl` through the SPIR-V path with `edits` made, compiled on first use.
    ///
    /// # Errors
    /// [`Error::KernelCompile`] where naga, an edit or the driver rejects it (the caller falls back to WGSL); the
    /// failure is not cached.
    #[allow(clippy::too_many_arguments)]
    #[cfg(not(target_arch = "wasm32"))]
    pub fn get_spirv(
        &mut self,
        device: &wgpu::Device,
        wgsl: &str,
        name: &str,
        edits: super::spirv::Edits,
        lang: (u8, u8),
        trusted: bool,
        debug: u32,
        stats: &mut Stats,
    ) -> Result<Arc<Compiled>> {
        let key = format!("// spirv {edits:?}\n{wgsl}");
        if let Some(p) = self.cache.get(&key) {
            stats.pipeline_cache_hits += 1;
            return Ok(p.clone());
        }
        let failed = |message: String| Error::KernelCompile { kernel: name.to_string(), message };
        let module = super::spirv::compile(wgsl, edits, lang, trusted).map_err(failed)?;
        if debug >= 2 {
            eprintln!("lazor: compiling kernel {name} through SPIR-V ({edits:?}):\n{wgsl}");
        }
        let scopes = Scopes::push(device);
        let layout = device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(name), entries: &module.entries });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let (x, y, z) = (module.workgroup[0], module.workgroup[1], module.workgroup[2]);
        let entry = [wgpu::PassthroughShaderEntryPoint { name: "main".into(), workgroup_size: (x, y, z) }];
        let desc = wgpu::ShaderModuleDescriptorPassthrough {
            label: Some(name),
            entry_points: entry[..].into(),
            spirv: Some(module.words.into()),
            ..Default::default()
        };
        // SAFETY: the words are naga's SPIR-V of a WGSL kernel naga validated, with bounds checks unless `trusted`
        // (the caller's promise, as for `get`), edited only by `spirv::patch`, which retypes or decorates and
        // refuses modules it does not recognise. The layout is derived from the same module's bindings (group 0,
        // dense from 0, each a buffer of the access the kernel declares), so every binding the shader reads is
        // bound with the type it declares. The entry point is `main`, the one every kernel has.
        let module = unsafe { device.create_shader_module_passthrough(desc) };
        let pipeline = self.pipeline(device, name, &module, Some(&pipeline_layout));
        scopes.pop().map_err(|e| failed(e.to_string()))?;
        stats.pipelines_compiled += 1;
        let compiled = Arc::new(Compiled { pipeline, layout, spirv: true });
        self.cache.insert(key, compiled.clone());
        Ok(compiled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wgpu::gpu::Gpu;

    #[test]
    fn a_kernel_that_does_not_compile_is_an_error_and_not_cached() {
        let Some(gpu) = crate::backend::wgpu::open_for_test(|| Gpu::open(false)) else { return };
        let mut cache = Pipelines::default();
        let mut stats = Stats::default();
        let bad = "@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }";
        let err = cache.get(&gpu.device, bad, "bad", false, 0, &mut stats).unwrap_err();
        assert!(matches!(err, Error::KernelCompile { ref kernel, .. } if kernel == "bad"), "{err}");
        assert_eq!(stats.pipelines_compiled, 0);
        assert!(cache.cache.is_empty());
        gpu.check_health().expect("the error was caught by a scope, not left uncaptured");
        let good = "@compute @workgroup_size(1) fn main() {}";
        cache.get(&gpu.device, good, "good", false, 0, &mut stats).unwrap();
        cache.get(&gpu.device, good, "good", false, 0, &mut stats).unwrap();
        assert_eq!((stats.pipelines_compiled, stats.pipeline_cache_hits), (1, 1));
    }
}
