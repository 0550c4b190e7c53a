// The demo page: opens the device (WebGPU, or lazor's CPU backend on request), trains the MLP a few steps per
// frame, draws the loss, and evaluates playground expressions. Query parameters, for tests and links:
// ?backend=cpu runs on the CPU backend, ?autostart starts training at once, ?steps=N stops after N steps.
import init, { open, Trainer, evaluate } from './pkg/lazor_web.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const maxSteps = Number(params.get('steps') || Infinity);
// What the browser tests read.
const demo = (window.__lazorDemo = { device: null, steps: 0, losses: [], accuracies: [], error: null, ready: false });

let trainer = null;
let running = false;

function fail(where, e) {
  const text = `${where}: ${e && e.message ? e.message : e}`;
  demo.error = text;
  $('status').textContent = text;
  $('status').className = 'error';
  console.error(text);
}

async function useDevice(backend) {
  const name = await open(backend);
  demo.device = name;
  $('status').textContent = `Running on ${name}.`;
  $('nogpu').hidden = true;
  for (const b of ['start', 'reset', 'eval']) $(b).disabled = false;
  newModel();
  demo.ready = true;
  await runExpression();
  if (params.has('autostart')) toggle();
}

function newModel() {
  const hidden = Number($('hidden').value);
  $('hidden-shown').textContent = hidden;
  trainer = new Trainer(1, hidden, 64, Number($('lr').value));
  demo.steps = 0;
  demo.losses = [];
  demo.accuracies = [];
  draw();
  $('step').textContent = '0';
  for (const id of ['loss', 'accuracy', 'rate', 'counts']) $(id).textContent = '–';
}

function toggle() {
  running = !running;
  $('start').textContent = running ? 'Pause' : 'Train';
  if (running) loop().catch((e) => fail('training', e));
}

// Ten steps per call: one realize each, their losses read back together in one await; between calls the page
// draws and stays responsive. The accuracy on the test images is read every 100 steps.
async function loop() {
  const start = performance.now();
  const startSteps = demo.steps;
  while (running && demo.steps < maxSteps) {
    const n = Math.min(10, maxSteps - demo.steps);
    const losses = await trainer.train(n);
    demo.losses.push(...losses);
    demo.steps = trainer.steps;
    if (demo.steps % 100 === 0 || demo.steps === maxSteps) {
      const acc = await trainer.accuracy();
      demo.accuracies.push({ step: demo.steps, accuracy: acc });
      $('accuracy').textContent = `${(100 * acc).toFixed(1)}%`;
    }
    $('step').textContent = demo.steps;
    $('loss').textContent = losses[losses.length - 1].toFixed(4);
    $('rate').textContent = ((demo.steps - startSteps) / ((performance.now() - start) / 1000)).toFixed(1);
    const [realizes, dispatches] = trainer.counts();
    $('counts').textContent = `${realizes} / ${dispatches}`;
    draw();
    await new Promise((r) => setTimeout(r, 0));
  }
  if (running) toggle();
}

function draw() {
  const c = $('curve');
  const g = c.getContext('2d');
  const [w, h, pad] = [c.width, c.height, 30];
  g.clearRect(0, 0, w, h);
  g.strokeStyle = '#c5ccd8';
  g.strokeRect(pad, 8, w - pad - 8, h - pad - 8);
  const ys = demo.losses;
  if (ys.length < 2) return;
  const top = Math.max(...ys.slice(0, 50));
  const x = (i) => pad + ((w - pad - 8) * i) / (ys.length - 1);
  const y = (v) => 8 + (h - pad - 8) * (1 - Math.min(v, top) / top);
  g.fillStyle = '#566179';
  g.font = '11px system-ui';
  g.fillText(top.toFixed(2), 2, 16);
  g.fillText('0', 18, h - pad);
  g.fillText(`${ys.length} steps`, w - 70, h - 10);
  g.strokeStyle = '#2563eb';
  g.beginPath();
  ys.forEach((v, i) => (i ? g.lineTo(x(i), y(v)) : g.moveTo(x(i), y(v))));
  g.stroke();
}

async function runExpression() {
  const out = $('value');
  try {
    const r = await evaluate($('expr').value);
    out.textContent = r.display;
    out.className = 'value';
    const names = r.kernels.map((k) => k.name).join(', ');
    $('kernels-line').textContent = `${r.kernels.length} kernel${r.kernels.length === 1 ? '' : 's'} ` +
      `(${r.dispatches} dispatch${r.dispatches === 1 ? '' : 'es'})${names ? ': ' + names : ''}`;
    const box = $('wgsl');
    box.replaceChildren(...r.kernels.map((k) => {
      const pre = document.createElement('pre');
      pre.textContent = `// ${k.name}\n${k.wgsl}`;
      return pre;
    }));
    demo.playground = r;
  } catch (e) {
    out.textContent = e && e.message ? e.message : String(e);
    out.className = 'value error';
    $('kernels-line').textContent = '';
  }
}

$('start').onclick = toggle;
$('reset').onclick = () => { running = false; $('start').textContent = 'Train'; newModel(); };
$('expr-form').onsubmit = (e) => { e.preventDefault(); runExpression(); };
for (const b of document.querySelectorAll('.example')) {
  b.onclick = () => { $('expr').value = b.textContent; runExpression(); };
}
$('use-cpu').onclick = () => useDevice('cpu').catch((e) => fail('opening the CPU backend', e));

try {
  await init();
} catch (e) {
  fail('loading the wasm module', e);
  throw e;
}
const backend = params.get('backend') || 'webgpu';
try {
  await useDevice(backend);
} catch (e) {
  if (backend !== 'webgpu') throw e;
  // No WebGPU: say so, and offer the CPU backend.
  $('status').textContent = 'No GPU device.';
  $('nogpu-why').textContent = e && e.message ? e.message : String(e);
  $('nogpu').hidden = false;
  demo.error = `no WebGPU: ${$('nogpu-why').textContent}`;
}
