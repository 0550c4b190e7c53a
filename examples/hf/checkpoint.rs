//! A Hugging Face model directory as `save_pretrained` writes it: `config.json` and `model.safetensors`, read into
//! lazor tensors by name, each checked against the shape the model expects and cast to the chosen dtype on load.
//! Every problem is an error naming the file, the key or the tensor; nothing panics.

use lazor::{DType, Device, Tensor, Var};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What went wrong loading a model, as a message naming the file and the tensor or key.
pub type Error = String;

/// The config and the tensors of one model directory.
pub struct Checkpoint {
    config: serde_json::Value,
    config_path: PathBuf,
    weights_path: PathBuf,
    /// The tensors not yet taken.
    tensors: HashMap<String, Tensor>,
    /// The dtype parameters are cast to; `None` keeps the file's.
    pub dtype: Option<DType>,
}

impl Checkpoint {
    /// Reads `dir/config.json` and `dir/model.safetensors` (host data, uploaded as each parameter is taken).
    pub fn open(dir: &Path, dtype: Option<DType>, device: &Device) -> Result<Checkpoint, Error> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;
        let config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", config_path.display()))?;
        if !config.is_object() {
            return Err(format!("{}: not a JSON object", config_path.display()));
        }
        let weights_path = dir.join("model.safetensors");
        let loaded = lazor::safetensors::load_on(&weights_path, device).map_err(|e| e.to_string())?;
        let tensors = loaded.into_iter().collect();
        Ok(Checkpoint { config, config_path, weights_path, tensors, dtype })
    }

    fn key(&self, key: &str) -> Option<&serde_json::Value> {
        self.config.get(key).filter(|v| !v.is_null())
    }

    /// Whether the config sets `key` (to anything but null).
    pub fn has_key(&self, key: &str) -> bool {
        self.key(key).is_some()
    }

    /// A positive integer of the config.
    pub fn usize(&self, key: &str) -> Result<usize, Error> {
        match self.key(key) {
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| format!("{}: `{key}` is {v}, not a positive integer", self.config_path.display())),
            None => Err(format!("{}: no `{key}`", self.config_path.display())),
        }
    }

    /// A positive integer of the config, or `default` where it is absent or null.
    pub fn usize_or(&self, key: &str, default: usize) -> Result<usize, Error> {
        match self.key(key) {
            Some(_) => self.usize(key),
            None => Ok(default),
        }
    }

    /// A number of the config, or `default` where it is absent or null.
    pub fn f32_or(&self, key: &str, default: f32) -> Result<f32, Error> {
        match self.key(key) {
            Some(v) => v
                .as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| format!("{}: `{key}` is {v}, not a number", self.config_path.display())),
            None => Ok(default),
        }
    }

    /// A boolean of the config, or `default` where it is absent or null.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, Error> {
        match self.key(key) {
            Some(v) => {
                v.as_bool().ok_or_else(|| format!("{}: `{key}` is {v}, not true or false", self.config_path.display()))
            }
            None => Ok(default),
        }
    }

    /// A string of the config, or `default` where it is absent or null.
    pub fn str_or(&self, key: &str, default: &str) -> Result<String, Error> {
        match self.key(key) {
            Some(v) => v
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{}: `{key}` is {v}, not a string", self.config_path.display())),
            None => Ok(default.to_string()),
        }
    }

    /// An error about the config: `what` is what lazor does not support.
    pub fn unsupported(&self, what: &str) -> Error {
        format!("{}: {what}", self.config_path.display())
    }

    /// Whether the file holds a tensor of that name not yet taken.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Tensor `name` of shape `shape` (a float tensor of the file), cast to [`Checkpoint::dtype`]; not yet a
    /// parameter.
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, Error> {
        let file = self.weights_path.display().to_string();
        let t = self.tensors.get(name).ok_or_else(|| format!("{file}: no tensor named `{name}`"))?;
        if t.shape() != shape || !t.dtype().is_float() {
            return Err(format!(
                "{file}: tensor `{name}` is {} {:?}, the model expects a float tensor of shape {shape:?}",
                t.dtype(),
                t.shape()
            ));
        }
        // Taken out: the one handle on its host data, which a parameter then uploads with no copy.
        let t = self.tensors.remove(name).expect("checked above");
        Ok(match self.dtype {
            Some(dt) => t.to_dtype(dt),
            None => t,
        })
    }

    /// [`Checkpoint::tensor`] as a parameter, uploaded now.
    pub fn param(&mut self, name: &str, shape: &[usize]) -> Result<Var, Error> {
        let t = self.tensor(name, shape)?;
        Ok(Var::new(t))
    }

    /// A Conv1D weight (`[in, out]`, as GPT-2 stores its projections) as a `Linear` weight `[out, in]`, copied once
    /// into that layout.
    pub fn transposed(&mut self, name: &str, input: usize, output: usize) -> Result<Var, Error> {
        let t = self.tensor(name, &[input, output])?;
        Ok(Var::new(t.t()))
    }

    /// Checks that every tensor of the file was taken, except those `ignored` (buffers older versions saved):
    /// a tensor the model does not know means the file is another model's.
    pub fn finish(self, ignored: &dyn Fn(&str) -> bool) -> Result<(), Error> {
        let mut left: Vec<&String> = self.tensors.keys().filter(|n| !ignored(n)).collect();
        left.sort();
        match left.first() {
            Some(name) => Err(format!(
                "{}: tensor `{name}` belongs to no parameter of the model ({} such tensors)",
                self.weights_path.display(),
                left.len()
            )),
            None => Ok(()),
        }
    }
}

/// `--dtype` as a lazor dtype.
pub fn parse_dtype(name: &str) -> Result<DType, Error> {
    match name {
        "f32" | "float32" => Ok(DType::F32),
        "f16" | "float16" => Ok(DType::F16),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        other => Err(format!("--dtype {other}: expected f32, f16 or bf16")),
    }
}
