//! The demo's training: an MLP (256 -> hidden -> 10, ReLU) learning the ten shapes of `data.rs` with AdamW on the
//! page's device. A step is one realize (forward, backward and the update of every parameter, through
//! `step_with`); the losses of a call's steps come back in one awaited read, so the page stays responsive.

use crate::data::{self, Rng, CLASSES, PIXELS};
use crate::js_error;
use lazor::nn::{self, Module};
use lazor::optim::{AdamW, AdamWConfig};
use lazor::{DType, Device, Tensor};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// Training images, uploaded once.
const TRAIN: usize = 2048;
/// Test images, for the accuracy.
const TEST: usize = 512;

/// What a training run holds between the page's calls.
struct State {
    dev: Device,
    model: nn::Sequential,
    opt: AdamW,
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    rng: Rng,
    batch: usize,
    steps: usize,
}

/// A model being trained in the page. Its methods return promises: the page awaits them between frames.
#[wasm_bindgen]
pub struct Trainer {
    state: Rc<RefCell<State>>,
}

#[wasm_bindgen]
impl Trainer {
    /// A new model (`hidden` units, weights from `seed`) and the data set, on the device [`crate::open`] chose.
    #[wasm_bindgen(constructor)]
    pub fn new(seed: u32, hidden: usize, batch: usize, lr: f32) -> Result<Trainer, JsValue> {
        let dev = crate::device()?;
        let seed = u64::from(seed);
        let mut rng = Rng::new(seed);
        let (train, test) = (data::make(TRAIN, &mut rng), data::make(TEST, &mut rng));
        let upload = |set: &data::Set| {
            let x = Tensor::from_vec_on(set.images.clone(), [set.len(), PIXELS], &dev);
            let y = Tensor::from_vec_on(set.labels.clone(), [set.len()], &dev);
            (x, y)
        };
        let ((train_x, train_y), (test_x, test_y)) = (upload(&train), upload(&test));
        lazor::realize(&[&train_x, &train_y, &test_x, &test_y]).map_err(js_error)?;
        let model = nn::Sequential::new(vec![
            Box::new(nn::Linear::new_on(PIXELS, hidden, true, seed * 10 + 1, &dev)),
            Box::new(nn::relu),
            Box::new(nn::Linear::new_on(hidden, CLASSES, true, seed * 10 + 2, &dev)),
        ]);
        let opt = AdamW::try_new(&model.vars(), AdamWConfig { lr, ..AdamWConfig::default() }).map_err(js_error)?;
        let state = State { dev, model, opt, train_x, train_y, test_x, test_y, rng, batch, steps: 0 };
        Ok(Trainer { state: Rc::new(RefCell::new(state)) })
    }

    /// Runs `n` training steps; resolves to their losses (a `Float32Array`), read back together once the last
    /// step has run.
    pub fn train(&self, n: usize) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let losses: Vec<Tensor> = {
                let mut st = state.borrow_mut();
                (0..n).map(|_| st.step()).collect()
            };
            let refs: Vec<&Tensor> = losses.iter().collect();
            let values = lazor::to_vecs_async(&refs).await.map_err(js_error)?;
            let flat: Vec<f32> = values.into_iter().map(|v| v[0]).collect();
            Ok(js_sys::Float32Array::from(&flat[..]).into())
        })
    }

    /// The fraction of the test images the model labels right, computed on the device; resolves to a number.
    pub fn accuracy(&self) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let hits = {
                let st = state.borrow();
                let predicted = lazor::no_grad(|| st.model.forward(&st.test_x).argmax(-1));
                predicted.eq(&st.test_y).to_dtype(DType::F32).mean_all()
            };
            let accuracy = hits.to_scalar_async().await.map_err(js_error)?;
            Ok(JsValue::from_f64(f64::from(accuracy)))
        })
    }

    /// Steps taken so far.
    #[wasm_bindgen(getter)]
    pub fn steps(&self) -> usize {
        self.state.borrow().steps
    }

    /// Realizes and dispatches the device has made so far, as `[realizes, dispatches]`.
    pub fn counts(&self) -> Vec<f64> {
        let s = self.state.borrow().dev.stats();
        vec![s.realizes as f64, s.dispatches as f64]
    }
}

impl State {
    /// One step on a random batch: lazy up to `step_with`, which realizes forward, backward and the update at once.
    /// Returns the step's loss, computed by that realize and not read.
    fn step(&mut self) -> Tensor {
        let rows: Vec<i32> = (0..self.batch).map(|_| self.rng.below(TRAIN) as i32).collect();
        let idx = Tensor::from_vec_on(rows, [self.batch], &self.dev);
        let (x, y) = (self.train_x.index_select(0, &idx), self.train_y.index_select(0, &idx));
        let loss = self.model.forward(&x).cross_entropy(&y);
        let grads = loss.backward();
        self.opt.step_with(&grads, &[&loss]);
        self.steps += 1;
        loss
    }
}
