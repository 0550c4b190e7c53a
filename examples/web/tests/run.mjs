// The browser test suite's driver: serves examples/web on 127.0.0.1, starts headless Chromium with WebGPU on
// SwiftShader (Chromium's CPU Vulkan), runs tests.html (the core tests on WebGPU and on the CPU backend, and every
// kernel's WGSL through Chromium's compiler), then loads the demo page and checks that it trains: the loss falls.
// Prints a line per test and `N passed, N failed`; exits 1 on any failure, including no WebGPU.
//
//   node run.mjs [--chromium PATH] [--steps N] [--backend webgpu|cpu] [--only suite|demo] [--filter TEXT]
//   (CHROMIUM=PATH also names the browser; --backend runs the suite on one backend only; SUITE_TIMEOUT=seconds
//   bounds the suite page, 420 by default; PROGRESS_LOG=file keeps the pages' progress lines, each test, case
//   checked and kernel compiled with the seconds since the start, where a hang shows what it was doing)
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const arg = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const browserPath = arg('--chromium', process.env.CHROMIUM || '/usr/bin/chromium');
const demoSteps = Number(arg('--steps', 200));
const suiteBackend = arg('--backend', null);
const only = arg('--only', null);
const filter = arg('--filter', '');
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
if (!fs.existsSync(path.join(root, 'pkg', 'lazor_web_bg.wasm'))) {
  console.error('run.mjs: examples/web/pkg is missing: run examples/web/build.sh first');
  process.exit(1);
}

// WebGPU is off in headless Chromium on Linux without a GPU: --enable-unsafe-webgpu turns it on, and
// --use-webgpu-adapter=swiftshader makes SwiftShader (Chromium's own CPU Vulkan, not Mesa's) the adapter, here and
// on a machine with a GPU alike. With Debian's Chromium 156 these two are enough (--enable-features=Vulkan, reported
// elsewhere, changes nothing); without the first, navigator.gpu offers no adapter and the suite fails. The network
// is closed and the profile fresh.
const FLAGS = [
  '--enable-unsafe-webgpu',
  '--use-webgpu-adapter=swiftshader',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-sync',
  '--no-sandbox',
];

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm',
  '.css': 'text/css', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  const file = path.join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream' });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'lazor-chromium-'));
const context = await chromium.launchPersistentContext(profile, { executablePath: browserPath, headless: true, args: FLAGS });
const results = [];
const started = Date.now();
const record = (name, ok, detail) => {
  results.push({ name, ok, detail });
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}: ${detail}`);
};

// Console errors and uncaught exceptions of a page fail its test: WebGPU reports bad shaders and commands there.
// The page's progress lines (console.debug) are kept, and printed when it times out.
const progress = [];
function watch(page, sink) {
  page.on('console', (m) => {
    if (m.type() === 'error') sink.push(m.text());
    if (m.type() === 'debug') progress.push(`${((Date.now() - started) / 1000).toFixed(1)} s ${m.text()}`);
  });
  page.on('pageerror', (e) => sink.push(`uncaught: ${e.message}`));
}

async function waitFor(page, expr, seconds) {
  await page.waitForFunction(expr, null, { timeout: seconds * 1000, polling: 250 });
}

try {
  // The core tests.
  if (only !== 'demo') {
    const page = await context.newPage();
    const errors = [];
    watch(page, errors);
    const t0 = Date.now();
    const query = new URLSearchParams({ ...(suiteBackend ? { backend: suiteBackend } : {}), ...(filter ? { filter } : {}) });
    await page.goto(`${base}/tests.html?${query}`);
    await waitFor(page, 'window.__lazorSuite && window.__lazorSuite.done', Number(process.env.SUITE_TIMEOUT || 420));
    const suite = await page.evaluate(() => window.__lazorSuite);
    for (const t of suite.results) record(`${t.backend}: ${t.name}`, t.ok, `${t.detail}${t.ms ? ` (${Math.round(t.ms)} ms)` : ''}`);
    // The backends whose device opened: a suite that could not open WebGPU did not run on it.
    const opened = suite.opened || [];
    const wanted = suiteBackend ? [suiteBackend] : ['webgpu', 'cpu'];
    record(`suite ran on ${wanted.join(' and ')}`, wanted.every((b) => opened.includes(b)) && !suite.error,
      suite.error || `opened: ${opened.join(', ') || 'none'}`);
    record('tests page: no console errors', errors.length === 0, errors.join(' | ') || `none (${Date.now() - t0} ms)`);
    await page.close();
  }
  // The demo page trains on WebGPU, and the loss falls.
  if (only !== 'suite') {
    const page = await context.newPage();
    const errors = [];
    watch(page, errors);
    const t0 = Date.now();
    await page.goto(`${base}/index.html?autostart&steps=${demoSteps}`);
    // The accuracy of the last step is read after the step count is shown: wait for both.
    await waitFor(page, `window.__lazorDemo && (window.__lazorDemo.error || (window.__lazorDemo.steps >= ${demoSteps} && ` +
      `window.__lazorDemo.accuracies.some((a) => a.step >= ${demoSteps})))`, 300);
    const demo = await page.evaluate(() => window.__lazorDemo);
    const ok = !demo.error && /WebGPU/.test(demo.device || '');
    record('demo: opens WebGPU', ok, demo.error || demo.device);
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
    const [first, last] = [mean(demo.losses.slice(0, 10)), mean(demo.losses.slice(-10))];
    record('demo: trains and the loss falls', demo.losses.length >= demoSteps && last < 0.5 * first,
      `${demo.losses.length} steps, mean loss of the first 10 ${first.toFixed(4)}, of the last 10 ${last.toFixed(4)} ` +
      `(${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    const tested = demo.accuracies[demo.accuracies.length - 1] || { step: 0, accuracy: 0 };
    record('demo: test accuracy', tested.accuracy > 0.5, `${(100 * tested.accuracy).toFixed(1)}% after ${tested.step} steps`);
    const pg = demo.playground;
    record('demo: playground evaluates and shows WGSL', !!pg && /^tensor\(/.test(pg.display) && pg.kernels.length > 0 &&
      pg.kernels.every((k) => k.wgsl.includes('@compute')), pg ? `${pg.kernels.length} kernels, ${pg.display.split('\n')[0]}` : 'nothing');
    record('demo page: no console errors', errors.length === 0, errors.join(' | ') || 'none');
    await page.screenshot({ path: path.join(os.tmpdir(), 'lazor-demo.png'), fullPage: true });
    await page.close();
  }
} catch (e) {
  record('browser run', false, String(e && e.stack ? e.stack : e));
  console.log(`the pages' last progress lines:\n  ${progress.slice(-15).join('\n  ')}`);
} finally {
  if (process.env.PROGRESS_LOG) fs.writeFileSync(process.env.PROGRESS_LOG, `${progress.join('\n')}\n`);
  await context.close();
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
const failed = results.filter((r) => !r.ok).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
