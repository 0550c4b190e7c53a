//! What a Vulkan adapter offers the SPIR-V path beyond wgpu's own features, read from the driver (its SPIR-V
//! version, bf16 cooperative matrices), and opening a device with `VK_KHR_shader_bfloat16` where it has them.

use ash::vk;
use std::ffi::{c_void, CStr};

/// `VK_KHR_shader_bfloat16`: its name, its feature structure's type and the cooperative-matrix component type it
/// adds (all numbered from the extension's number, 142). ash predates the extension, so they are spelled here.
const BF16_EXTENSION: &CStr = c"VK_KHR_shader_bfloat16";
const BF16_FEATURES: i32 = 1_000_141_000;
const COMPONENT_BF16: i32 = 1_000_141_000;

/// `VkPhysicalDeviceShaderBfloat16FeaturesKHR`.
#[repr(C)]
struct Bf16Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    shader_bfloat16_type: vk::Bool32,
    shader_bfloat16_dot_product: vk::Bool32,
    shader_bfloat16_cooperative_matrix: vk::Bool32,
}

impl Bf16Features {
    fn new(on: bool) -> Bf16Features {
        let b = vk::Bool32::from(on);
        Bf16Features {
            s_type: vk::StructureType::from_raw(BF16_FEATURES),
            p_next: std::ptr::null_mut(),
            shader_bfloat16_type: b,
            shader_bfloat16_dot_product: 0,
            shader_bfloat16_cooperative_matrix: b,
        }
    }
}

// SAFETY: the structure starts with the `sType`/`pNext` header every Vulkan structure chain walks, and its type
// value is the one the Vulkan registry gives it, so a driver that knows it reads it and one that does not skips it.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Bf16Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Bf16Features {}

/// What the SPIR-V path may use on an adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caps {
    /// The SPIR-V version the device takes: 1.6 for Vulkan 1.3, as wgpu uses.
    pub lang: (u8, u8),
    /// 16 x 16 x 16 cooperative matrices of bf16 operands accumulating in f32 on subgroups, with the features
    /// `VK_KHR_shader_bfloat16` needs for them.
    pub bf16_coop: bool,
}

/// The SPIR-V side of `adapter`, or `None` where it is not a Vulkan adapter.
pub fn caps(adapter: &wgpu::Adapter) -> Option<Caps> {
    // SAFETY: only queries the physical device; nothing is created or destroyed.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let shared = hal.shared_instance();
    let (instance, pd) = (shared.raw_instance(), hal.raw_physical_device());
    // SAFETY: the physical device belongs to this instance, which outlives the calls.
    let props = unsafe { instance.get_physical_device_properties(pd) };
    let lang = match (vk::api_version_major(props.api_version), vk::api_version_minor(props.api_version)) {
        (1, 0) => (1, 0),
        (1, 1) => (1, 3),
        (1, 2) => (1, 5),
        _ => (1, 6),
    };
    // SAFETY: as above.
    let extensions = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
    let has = |name: &CStr| extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(name));
    let mut bf16_coop = false;
    if has(BF16_EXTENSION) && has(ash::khr::cooperative_matrix::NAME) {
        let mut features = Bf16Features::new(false);
        let mut query = vk::PhysicalDeviceFeatures2::default().push_next(&mut features);
        // SAFETY: the chain holds a structure the extension (present, checked above) defines.
        unsafe { instance.get_physical_device_features2(pd, &mut query) };
        let coop = ash::khr::cooperative_matrix::Instance::new(shared.entry(), instance);
        // SAFETY: the extension is present (checked above).
        let shapes = unsafe { coop.get_physical_device_cooperative_matrix_properties(pd) }.unwrap_or_default();
        let bf16 = vk::ComponentTypeKHR::from_raw(COMPONENT_BF16);
        let f32 = vk::ComponentTypeKHR::FLOAT32;
        bf16_coop = features.shader_bfloat16_type == vk::TRUE
            && features.shader_bfloat16_cooperative_matrix == vk::TRUE
            && shapes.iter().any(|p| {
                (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                    && (p.a_type, p.b_type, p.c_type, p.result_type) == (bf16, bf16, f32, f32)
                    && p.scope == vk::ScopeKHR::SUBGROUP
            });
    }
    Some(Caps { lang, bf16_coop })
}

/// Opens a device on Vulkan `adapter` as wgpu's `request_device` does with `desc`, plus `VK_KHR_shader_bfloat16`
/// with bf16 cooperative matrices on.
///
/// # Errors
/// wgpu's message where the driver refuses the device.
///
/// # Safety
/// The adapter must offer the extension and both features ([`caps`] said `bf16_coop`): the callback only adds them.
pub unsafe fn open_bf16(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue), String> {
    let mut features = Bf16Features::new(true);
    let open = {
        // SAFETY: as `caps`; the guard is dropped before the device is made from what it opened.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }.ok_or("not a Vulkan adapter")?;
        let features = &mut features;
        let callback: Box<wgpu::hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            args.extensions.push(BF16_EXTENSION);
            *args.create_info = std::mem::take(args.create_info).push_next(features);
        });
        // SAFETY: the callback adds one extension the adapter has and turns on features it offers (the caller's
        // promise); it removes nothing.
        unsafe {
            hal.open_with_callback(desc.required_features, &desc.required_limits, &desc.memory_hints, Some(callback))
        }
        .map_err(|e| e.to_string())?
    };
    // SAFETY: the device was opened on this adapter with the descriptor's features and limits.
    unsafe { adapter.create_device_from_hal(open, desc) }.map_err(|e| e.to_string())
}
