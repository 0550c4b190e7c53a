//! `kernel-stats`: what a Vulkan driver made of lazor's kernels (registers, local memory, workgroup memory, code
//! size), read through `VK_KHR_pipeline_executable_properties`, which wgpu does not enable.
//!
//! Input: logs of `LAZOR_DEBUG=2` (every kernel's WGSL as it is compiled) or `.wgsl` files. Each kernel is
//! translated to SPIR-V by naga with the options wgpu 30 uses on Vulkan (`wgpu-hal`'s `vulkan/adapter.rs`): matmul
//! kernels as lazor creates them, trusted (no index clamps, no forced loop bounds), every other kernel with wgpu's
//! runtime checks. A pipeline is built from it on the first discrete GPU (else the first device) and the driver's
//! statistics are printed as a Markdown table.

use ash::vk;
use std::ffi::CStr;

/// One kernel to compile: its name, source, and whether lazor compiles it without runtime checks.
struct Kernel {
    name: String,
    wgsl: String,
    trusted: bool,
}

/// The kernels in a `LAZOR_DEBUG=2` log (after each `lazor: compiling kernel NAME:` line, up to the last `}` before
/// the next `lazor:` line), or the file itself when it holds none: one kernel, trusted unless `checked`.
fn kernels_in(path: &str, checked: bool) -> Vec<Kernel> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("kernel-stats: cannot read {path}: {e}"));
    parse(&text, path, checked)
}

/// The kernels in `text` read from `path` (see [`kernels_in`]).
fn parse(text: &str, path: &str, checked: bool) -> Vec<Kernel> {
    const MARK: &str = "lazor: compiling kernel ";
    if !text.contains(MARK) {
        let name = std::path::Path::new(path).file_stem().map_or(path.into(), |s| s.to_string_lossy().into_owned());
        return vec![Kernel { name, wgsl: text.to_string(), trusted: !checked }];
    }
    let mut out = Vec::new();
    for part in text.split(MARK).skip(1) {
        let Some((name, body)) = part.split_once(":\n") else { continue };
        let lines: Vec<&str> = body.lines().take_while(|l| !l.starts_with("lazor:")).collect();
        // Program output may follow the kernel: it ends at its last closing brace in the first column.
        let end = lines.iter().rposition(|l| *l == "}").map_or(0, |i| i + 1);
        let trusted = name.starts_with("matmul") && !checked;
        out.push(Kernel { name: name.to_string(), wgsl: lines[..end].join("\n"), trusted });
    }
    out
}

/// A resource the pipeline layout must declare: group, binding, descriptor type.
type Binding = (u32, u32, vk::DescriptorType);

/// SPIR-V for `k` as wgpu would make it, and the bindings it declares.
fn spirv(k: &Kernel) -> Result<(Vec<u32>, Vec<Binding>), String> {
    let module = naga::front::wgsl::parse_str(&k.wgsl).map_err(|e| e.emit_to_string(&k.wgsl))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{e:?}"))?;
    use naga::proc::BoundsCheckPolicy::{Restrict, Unchecked};
    let mut opts = naga::back::spv::Options {
        lang_version: (1, 6),
        flags: naga::back::spv::WriterFlags::empty(),
        // Buffers: the H200's driver offers robustBufferAccess2, with which wgpu leaves them unchecked.
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: if k.trusted { Unchecked } else { Restrict },
            buffer: Unchecked,
            image_load: Unchecked,
            binding_array: Unchecked,
        },
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::Native,
        ..Default::default()
    };
    opts.force_loop_bounding = !k.trusted;
    let stage =
        naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    let words = naga::back::spv::write_vec(&module, &info, &opts, Some(&stage)).map_err(|e| format!("{e:?}"))?;
    let bindings = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| {
            let b = g.binding.as_ref()?;
            let ty = match g.space {
                naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
                _ => vk::DescriptorType::STORAGE_BUFFER,
            };
            Some((b.group, b.binding, ty))
        })
        .collect();
    Ok((words, bindings))
}

/// A Vulkan device opened with pipeline executable properties (and what lazor's kernels need: f16, 16-bit
/// storage, zero-initialised workgroup memory, cooperative matrices where offered).
struct Gpu {
    device: ash::Device,
    stats: ash::khr::pipeline_executable_properties::Device,
    name: String,
}

/// Opens the first discrete GPU, else the first device.
///
/// # Safety
/// Plain Vulkan calls on handles this function creates; the instance and device are never destroyed (the
/// process exits after one run).
unsafe fn open() -> Result<Gpu, String> {
    let entry = ash::Entry::load().map_err(|e| format!("no Vulkan loader: {e}"))?;
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let instance = entry
        .create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)
        .map_err(|e| format!("vkCreateInstance: {e}"))?;
    let devices = instance.enumerate_physical_devices().map_err(|e| format!("no devices: {e}"))?;
    let discrete = |pd: &&vk::PhysicalDevice| {
        instance.get_physical_device_properties(**pd).device_type == vk::PhysicalDeviceType::DISCRETE_GPU
    };
    let pd = *devices.iter().find(discrete).or(devices.first()).ok_or("no Vulkan device")?;
    let props = instance.get_physical_device_properties(pd);
    let name = CStr::from_ptr(props.device_name.as_ptr()).to_string_lossy().into_owned();
    let exts = instance.enumerate_device_extension_properties(pd).map_err(|e| e.to_string())?;
    let has = |n: &CStr| exts.iter().any(|e| CStr::from_ptr(e.extension_name.as_ptr()) == n);
    if !has(ash::khr::pipeline_executable_properties::NAME) {
        return Err(format!("{name} does not offer VK_KHR_pipeline_executable_properties"));
    }
    let family = instance
        .get_physical_device_queue_family_properties(pd)
        .iter()
        .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .ok_or("no compute queue")? as u32;
    let priority = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priority)];
    let coop = has(ash::khr::cooperative_matrix::NAME);
    let mut names = vec![ash::khr::pipeline_executable_properties::NAME.as_ptr()];
    if coop {
        names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
    }
    let mut executable =
        vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().shader_float16(true).vulkan_memory_model(coop);
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default().shader_zero_initialize_workgroup_memory(true);
    let mut matrices = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&names)
        .push_next(&mut executable)
        .push_next(&mut v11)
        .push_next(&mut v12)
        .push_next(&mut v13);
    if coop {
        info = info.push_next(&mut matrices);
    }
    let device = instance.create_device(pd, &info, None).map_err(|e| format!("vkCreateDevice on {name}: {e}"))?;
    let stats = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
    Ok(Gpu { device, stats, name })
}

/// The driver's statistics for one kernel, by name, from a pipeline built with statistics captured.
///
/// # Safety
/// Vulkan calls on `gpu`'s live device; the objects made here are left for the process exit.
unsafe fn statistics(gpu: &Gpu, k: &Kernel) -> Result<Vec<(String, u64)>, String> {
    let (words, bindings) = spirv(k)?;
    let d = &gpu.device;
    let groups = bindings.iter().map(|b| b.0 + 1).max().unwrap_or(0);
    let mut layouts = Vec::new();
    for g in 0..groups {
        let set: Vec<_> = bindings
            .iter()
            .filter(|b| b.0 == g)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b.1)
                    .descriptor_type(b.2)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&set);
        layouts.push(d.create_descriptor_set_layout(&info, None).map_err(|e| e.to_string())?);
    }
    let layout = d
        .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts), None)
        .map_err(|e| e.to_string())?;
    let module =
        d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None).map_err(|e| e.to_string())?;
    let stage =
        vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(c"main");
    let info = vk::ComputePipelineCreateInfo::default()
        .flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR)
        .stage(stage)
        .layout(layout);
    let pipeline = d
        .create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
        .map_err(|(_, e)| format!("vkCreateComputePipelines: {e}"))?[0];
    let executable = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(0);
    let found = gpu.stats.get_pipeline_executable_statistics(&executable).map_err(|e| e.to_string())?;
    Ok(found
        .iter()
        .map(|s| {
            let name = CStr::from_ptr(s.name.as_ptr()).to_string_lossy().into_owned();
            let value = match s.format {
                vk::PipelineExecutableStatisticFormatKHR::BOOL32 => u64::from(s.value.b32),
                vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64 as u64,
                vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64,
                _ => s.value.f64 as u64,
            };
            (name, value)
        })
        .collect())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let checked = args.iter().any(|a| a == "--checked");
    args.retain(|a| a != "--checked");
    if args.is_empty() {
        eprintln!("usage: kernel-stats [--checked] LOG_OR_WGSL... (logs of LAZOR_DEBUG=2, or .wgsl files: trusted unless --checked)");
        std::process::exit(2);
    }
    // SAFETY: `open` and `statistics` make and use their own Vulkan objects on one thread.
    let gpu = unsafe { open() }.unwrap_or_else(|e| {
        eprintln!("kernel-stats: {e}");
        std::process::exit(1);
    });
    println!("device: {}\n", gpu.name);
    let mut columns: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for path in &args {
        for k in kernels_in(path, checked) {
            // SAFETY: as above.
            match unsafe { statistics(&gpu, &k) } {
                Ok(stats) => {
                    for (name, _) in &stats {
                        if !columns.contains(name) {
                            columns.push(name.clone());
                        }
                    }
                    rows.push((k, Ok(stats)));
                }
                Err(e) => rows.push((k, Err(e))),
            }
        }
    }
    println!("| kernel | checks | {} |", columns.join(" | "));
    println!("|---|---|{}", "---:|".repeat(columns.len()));
    for (k, stats) in rows {
        let checks = if k.trusted { "trusted" } else { "wgpu's" };
        match stats {
            Ok(stats) => {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        let v = stats.iter().find(|(n, _)| n == c).map(|s| s.1);
                        // NVIDIA's driver (580) sets bit 36 of the local memory size; the bytes are below it.
                        let v = if c.contains("Local Memory") { v.map(|v| v & 0xffff_ffff) } else { v };
                        v.map_or("-".into(), |v| v.to_string())
                    })
                    .collect();
                println!("| {} | {checks} | {} |", k.name, cells.join(" | "));
            }
            Err(e) => println!("| {} | {checks} | failed: {} |", k.name, e.lines().next().unwrap_or("")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_debug_log_gives_each_kernel_without_the_programs_output() {
        let log = "step 0\nlazor: compiling kernel add [4]:\nfn main() {\n}\nstep 1: loss 2.5\n\
                   lazor: realize 3 nodes\nlazor: compiling kernel matmul+add [8x8]:\nfn f() {\n    x;\n}\n";
        let k = parse(log, "run.log", false);
        assert_eq!(k.len(), 2);
        assert_eq!((k[0].name.as_str(), k[0].wgsl.as_str(), k[0].trusted), ("add [4]", "fn main() {\n}", false));
        assert_eq!(
            (k[1].name.as_str(), k[1].wgsl.as_str(), k[1].trusted),
            ("matmul+add [8x8]", "fn f() {\n    x;\n}", true)
        );
        // --checked: matmul kernels too get wgpu's checks.
        assert!(!parse(log, "run.log", true)[1].trusted);
    }

    #[test]
    fn a_wgsl_file_is_one_kernel_named_after_it() {
        let k = parse("fn main() {}", "dir/tiled.wgsl", false);
        assert_eq!((k.len(), k[0].name.as_str(), k[0].trusted), (1, "tiled", true));
        assert!(!parse("fn main() {}", "dir/tiled.wgsl", true)[0].trusted);
    }
}
