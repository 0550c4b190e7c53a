// Runs the browser suite (src/suite.rs) on each backend asked for, then compiles every kernel's WGSL with the
// browser's compiler (createShaderModule, getCompilationInfo, and a compute pipeline), and leaves the outcome in
// window.__lazorSuite for tests/run.mjs.
import init, { run_suite } from './pkg/lazor_web.js';

const log = document.getElementById('log');
const lines = [];
const say = (s) => { lines.push(s); log.textContent = lines.join('\n'); };
const suite = (window.__lazorSuite = { done: false, results: [], opened: [], error: null });

// Each kernel's WGSL through the browser's compiler: errors fail, warnings are listed (Tint warns where naga did not).
async function compileAll(backend, kernels) {
  const adapter = navigator.gpu && (await navigator.gpu.requestAdapter());
  if (!adapter) return [{ name: `${backend}: compile the WGSL`, ok: false, detail: 'no WebGPU adapter to compile with' }];
  const features = adapter.features.has('shader-f16') ? ['shader-f16'] : [];
  const device = await adapter.requestDevice({ requiredFeatures: features, requiredLimits: {
    maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
    maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
    maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
  } });
  const out = [];
  for (const k of kernels) {
    try {
      out.push(await compileOne(device, backend, k));
    } catch (e) {
      out.push({ name: `${backend}: WGSL of ${k.name}`, ok: false, detail: `compiling threw: ${e.message || e}`, ms: 0 });
    }
  }
  device.destroy();
  return out;
}

async function compileOne(device, backend, k) {
  console.debug(`compile: ${backend}: ${k.name}`);
  const start = performance.now();
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code: k.wgsl, label: k.name });
  const info = await module.getCompilationInfo();
  const errors = info.messages.filter((m) => m.type === 'error');
  const warnings = info.messages.filter((m) => m.type === 'warning');
  let pipeline = null;
  if (!errors.length) {
    try {
      await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    } catch (e) {
      pipeline = String(e.message || e);
    }
  }
  const scope = await device.popErrorScope();
  const text = (m) => `${m.lineNum}:${m.linePos} ${m.message}`;
  const problems = [...errors.map(text), ...(pipeline ? [pipeline] : []), ...(scope ? [scope.message] : [])];
  return {
    name: `${backend}: WGSL of ${k.name}`,
    ok: problems.length === 0,
    detail: problems.length ? problems.join('; ') : warnings.length ? `warnings: ${warnings.map(text).join('; ')}` : 'compiles',
    ms: performance.now() - start,
  };
}

try {
  await init();
  const query = new URLSearchParams(location.search);
  const asked = query.get('backend');
  for (const backend of asked ? [asked] : ['webgpu', 'cpu']) {
    const r = await run_suite(backend, query.get('filter') || '');
    say(`== ${backend}: ${r.device}`);
    if (r.device !== 'none') suite.opened.push(backend);
    const compiled = await compileAll(backend, r.wgsl);
    for (const t of [...r.results, ...compiled]) {
      suite.results.push({ backend, ...t });
      say(`${t.ok ? 'ok  ' : 'FAIL'} ${t.name}${t.ms ? ` (${t.ms.toFixed(0)} ms)` : ''}: ${t.detail}`);
    }
  }
} catch (e) {
  suite.error = String(e && e.stack ? e.stack : e);
  say(`error: ${suite.error}`);
}
const failed = suite.results.filter((t) => !t.ok).length;
say(`${suite.results.length - failed} passed, ${failed} failed`);
suite.done = true;
