//! lazor in the browser: the bindings the demo page (`index.html`) and the browser test suite (`tests.html`) call.
//! Everything that reads a value from the GPU is awaited: the page's one thread never blocks.
//!
//! Build with `examples/web/build.sh`; it writes the wasm module and its JS glue to `examples/web/pkg/`.

mod data;
mod playground;
mod suite;
mod train;
mod zoo;

use lazor::Device;
use std::cell::RefCell;
use wasm_bindgen::prelude::*;

pub use playground::evaluate;
pub use suite::run_suite;
pub use train::Trainer;

thread_local! {
    /// The device the page chose ([`open`]).
    static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// Panics go to the console with their message and place (the default loses them in `unreachable`).
#[wasm_bindgen(start)]
fn start() {
    std::panic::set_hook(Box::new(|info| web_sys::console::error_1(&format!("{info}").into())));
}

/// An error as the page shows it.
pub(crate) fn js_error(e: impl std::fmt::Display) -> JsValue {
    JsError::new(&e.to_string()).into()
}

/// Opens the device the page runs on: `"webgpu"` the browser's WebGPU adapter (an error saying so where there is
/// none), `"cpu"` lazor's CPU backend (single-threaded in the browser). Returns the device's name.
#[wasm_bindgen]
pub async fn open(backend: String) -> Result<String, JsValue> {
    let dev = match backend.as_str() {
        "cpu" => Device::cpu(),
        "webgpu" => Device::new_async().await.map_err(js_error)?,
        other => return Err(js_error(format!("unknown backend `{other}`: expected webgpu or cpu"))),
    };
    let name = describe(&dev);
    DEVICE.with(|d| *d.borrow_mut() = Some(dev));
    Ok(name)
}

/// The device's name and, on WebGPU, the features lazor's kernels use there.
fn describe(dev: &Device) -> String {
    if dev.is_cpu() {
        return dev.name();
    }
    let (f16, subgroups) = dev.wgpu().map_or((false, false), |w| (w.native_f16(), w.subgroups()));
    format!("{} (WebGPU; native f16: {f16}, subgroups: {subgroups})", dev.adapter_name())
}

/// The device [`open`] chose.
pub(crate) fn device() -> Result<Device, JsValue> {
    DEVICE.with(|d| d.borrow().clone()).ok_or_else(|| js_error("no device yet: call open() first"))
}
