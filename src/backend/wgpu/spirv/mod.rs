//! The SPIR-V path of the Vulkan backend: a kernel's WGSL goes through naga to SPIR-V, lazor edits it where Vulkan
//! can say what WGSL cannot (bf16 cooperative matrices, `NoContraction`), and wgpu hands it to the driver as it is
//! (passthrough shaders, with the bind group layout lazor derives itself). Everything else stays on the WGSL path.

#[cfg(not(target_arch = "wasm32"))]
mod patch;
#[cfg(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) mod vulkan;

#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
/// What a kernel asks of the SPIR-V path: the edits its module needs. The default asks for none (a kernel that
/// `LAZOR_SPIRV=all` sends this way unchanged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Edits {
    /// Its `f16` stands for bf16 bits, which run on bf16 cooperative matrices ([`patch::bf16`]).
    pub bf16: bool,
    /// Its float arithmetic is rounded as written ([`patch::no_contraction`]).
    pub exact: bool,
    /// Its f16 pairs unpacked from words are the words' bits ([`patch::words_as_bits`]; a bf16 kernel's always are).
    pub bits: bool,
}

pub use crate::env::SpirvMode as Mode;

#[cfg(not(target_arch = "wasm32"))]
/// A kernel compiled to SPIR-V: its words, the bind group layout its bindings need, and its workgroup size.
pub struct Module {
    pub words: Vec<u32>,
    pub entries: Vec<wgpu::BindGroupLayoutEntry>,
    pub workgroup: [u32; 3],
}

#[cfg(not(target_arch = "wasm32"))]
/// SPIR-V for `wgsl` with `edits` made, for a Vulkan device of SPIR-V version `lang`; `trusted`: without bounds
/// checks (every index in range by construction, as for [`Pipelines::get`](super::pipelines::Pipelines::get)).
///
/// # Errors
/// A message where naga rejects the source or an edit cannot be made.
pub fn compile(wgsl: &str, edits: Edits, lang: (u8, u8), trusted: bool) -> Result<Module, String> {
    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| e.emit_to_string(wgsl))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| e.emit_to_string(wgsl))?;
    let [entry] = &module.entry_points[..] else { return Err("a kernel has one entry point".into()) };
    let policy = if trusted { BoundsCheckPolicy::Unchecked } else { BoundsCheckPolicy::Restrict };
    let options = spv::Options {
        lang_version: lang,
        flags: spv::WriterFlags::empty(),
        // No binding map: each binding keeps its WGSL group and number as its descriptor set and binding.
        fake_missing_bindings: true,
        bounds_check_policies: BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: BoundsCheckPolicy::Restrict,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        // Kernels write their workgroup memory before reading it; wgpu zeroes it for WebGPU's guarantee.
        zero_initialize_workgroup_memory: if trusted {
            spv::ZeroInitializeWorkgroupMemoryMode::None
        } else {
            spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
        },
        // lazor's loops all run to bounds computed from sizes: wgpu's guard against endless loops (a counter in
        // every loop) would only keep the driver from unrolling them, as it does for the kernels wgpu compiles
        // unchecked.
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: entry.name.clone() };
    let mut words = spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| e.to_string())?;
    // bf16 kernels stage their words as bits too: their values depend on it.
    if edits.bits || edits.bf16 {
        words = patch::words_as_bits(&words, edits.bf16)?;
    }
    if edits.bf16 {
        words = patch::bf16(&words)?;
    }
    if edits.exact {
        words = patch::no_contraction(&words)?;
    }
    Ok(Module { words, entries: layout(&module)?, workgroup: entry.workgroup_size })
}

#[cfg(not(target_arch = "wasm32"))]
/// The bind group layout of `module`'s bindings, which wgpu derives itself for WGSL but not for SPIR-V: group 0,
/// numbered densely from 0 (lazor's kernels bind parameters at 0, then outputs, then inputs).
///
/// # Errors
/// Where a binding is outside group 0, the numbers have a gap, or one is not a buffer.
fn layout(module: &naga::Module) -> Result<Vec<wgpu::BindGroupLayoutEntry>, String> {
    let mut entries = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(b) = &var.binding else { continue };
        if b.group != 0 {
            return Err(format!("binding {} is in group {}, not 0", b.binding, b.group));
        }
        let ty = match var.space {
            naga::AddressSpace::Uniform => wgpu::BufferBindingType::Uniform,
            naga::AddressSpace::Storage { access } => {
                wgpu::BufferBindingType::Storage { read_only: !access.contains(naga::StorageAccess::STORE) }
            }
            other => return Err(format!("binding {} is in address space {other:?}, not a buffer", b.binding)),
        };
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: b.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        });
    }
    entries.sort_by_key(|e| e.binding);
    if entries.iter().enumerate().any(|(i, e)| e.binding != i as u32) {
        return Err("bindings are not numbered densely from 0".into());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests;
