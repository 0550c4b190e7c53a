//! The steady-speed section: a fixed sequence of different cases and sizes in one process on the default device,
//! as a user's program runs them, each against its own figure in a fresh process; with the GPU's kernel time
//! beside the wall time, the loop synchronized every realize beside the pipelined one, and buffers allocated.

use crate::common::Case;
use crate::timing::{abc, inputs, measure, measure_parts, Config};
use lazor::{Device, Tensor};
use std::time::Instant;

/// Realizes per wait in the pipelined loop.
const BATCH: u32 = 8;

/// An expression over a cell's inputs.
type Expr = Box<dyn Fn(&[Tensor]) -> Tensor>;

/// One case of the sequence: what it builds from its inputs, and the bytes or flops of one realize.
#[derive(Clone, Copy)]
enum Cell {
    Elementwise(Case, usize),
    /// `x.sum(1)` of `[rows, cols]`.
    RowSums(usize, usize),
    /// `x.matmul(w)` of `n`^3, with `w` transposed when `.1`.
    Matmul(usize, bool),
}

impl Cell {
    fn name(self) -> String {
        match self {
            Cell::Elementwise(c, n) => format!("{} 2^{}", c.name(), n.trailing_zeros()),
            Cell::RowSums(r, c) => format!("sum(1) [{r}, {c}]"),
            Cell::Matmul(n, t) => format!("x.matmul(&w{}) {n}^3", if t { ".t()" } else { "" }),
        }
    }

    fn parse(name: &str) -> Option<Cell> {
        sequence(u64::MAX).into_iter().find(|c| c.name() == name)
    }

    /// The inputs, realized, and the expression over them.
    fn setup(self, dev: &Device) -> (Vec<Tensor>, Expr) {
        match self {
            Cell::Elementwise(case, n) => (abc(dev, n).to_vec(), Box::new(move |t| case.build(&t[0], &t[1], &t[2]))),
            Cell::RowSums(r, c) => {
                let x = Tensor::from_vec_on(inputs(r * c, 4), [r, c], dev);
                x.realize().expect("upload");
                (vec![x], Box::new(|t| t[0].sum(1)))
            }
            Cell::Matmul(n, transposed) => {
                let x = Tensor::from_vec_on(inputs(n * n, 5), [n, n], dev);
                let w = Tensor::from_vec_on(inputs(n * n, 6), [n, n], dev);
                lazor::realize(&[&x, &w]).expect("upload");
                let f: Expr =
                    if transposed { Box::new(|t| t[0].matmul(&t[1].t())) } else { Box::new(|t| t[0].matmul(&t[1])) };
                (vec![x, w], f)
            }
        }
    }

    /// A realize's rate at `secs` seconds: GB/s, or TFLOP/s for products.
    fn rate(self, secs: f64) -> f64 {
        match self {
            Cell::Elementwise(_, n) => 16.0 * n as f64 / secs / 1e9,
            Cell::RowSums(r, c) => 4.0 * (r * c + r) as f64 / secs / 1e9,
            Cell::Matmul(n, _) => 2.0 * (n as f64).powi(3) / secs / 1e12,
        }
    }
}

/// The sequence: elementwise cases at 2^26 and 2^27 (where one binding holds it), a reduction, two products.
fn sequence(max_bytes: u64) -> Vec<Cell> {
    let mut cells = Vec::new();
    for l in [26u32, 27] {
        if 4u64 << l <= max_bytes {
            cells.extend(Case::ALL.map(|c| Cell::Elementwise(c, 1 << l)));
        }
    }
    cells.extend([Cell::RowSums(1 << 13, 1 << 13), Cell::Matmul(1024, false), Cell::Matmul(1024, true)]);
    cells
}

/// What one cell measured: per realize, pipelined wall time, synchronized wall time, GPU kernel time; buffers
/// allocated per pipelined batch.
struct Measured {
    pipelined: f64,
    /// Of the pipelined loop, per realize: host time in `realize` calls, then waiting in `synchronize`.
    host: f64,
    wait: f64,
    synced: f64,
    kernels: Option<f64>,
    allocated: f64,
    /// Bytes of live buffers and of pooled free buffers after the cell.
    live: u64,
    pooled: u64,
}

fn measure_cell(dev: &Device, cfg: &Config, cell: Cell) -> Measured {
    let (inputs, f) = cell.setup(dev);
    let before = dev.stats().buffers_allocated;
    let mut batches = 0u32;
    let [pipelined, host, wait] = measure_parts(cfg, || {
        let start = Instant::now();
        for _ in 0..BATCH {
            f(&inputs).realize().expect("realize");
        }
        let recorded = start.elapsed();
        dev.synchronize().expect("sync");
        batches += 1;
        [start.elapsed(), recorded, start.elapsed() - recorded]
    })
    .map(|t| t.per(BATCH));
    let allocated = (dev.stats().buffers_allocated - before) as f64 / batches as f64;
    let synced = measure(cfg, || {
        f(&inputs).realize().expect("realize");
        dev.synchronize().expect("sync");
    });
    let profile = dev.profile(|| {
        for _ in 0..BATCH {
            f(&inputs).realize().expect("realize");
        }
        dev.synchronize().expect("sync");
    });
    let kernels = profile.total_time().map(|t| t.as_secs_f64() / BATCH as f64);
    if std::env::var_os("LAZOR_STEADY_PROBE").is_some() {
        // The pipelined loop with every batch profiled: its wall time beside its kernels' GPU time, per batch.
        let mut walls = Vec::new();
        let profile = dev.profile(|| {
            for _ in 0..6 {
                let start = Instant::now();
                let kept: Vec<Tensor> = (0..BATCH).map(|_| f(&inputs)).collect();
                for t in &kept {
                    t.realize().expect("realize");
                }
                dev.synchronize().expect("sync");
                walls.push(start.elapsed().as_secs_f64() * 1e3);
            }
        });
        let ks: Vec<String> = profile.kernels().iter().map(|k| format!("{}x{}", k.dispatches, k.name)).collect();
        eprintln!(
            "probe {}: batch walls ms {walls:.2?}; kernels total {:.2} ms over 6 batches; {}",
            cell.name(),
            profile.total_time().map_or(0.0, |t| t.as_secs_f64() * 1e3),
            ks.join(", ")
        );
    }
    let stats = dev.stats();
    Measured {
        pipelined: pipelined.median.as_secs_f64(),
        host: host.median.as_secs_f64(),
        wait: wait.median.as_secs_f64(),
        synced: synced.median.as_secs_f64(),
        kernels,
        allocated,
        live: stats.live_buffer_bytes,
        pooled: stats.pool_bytes,
    }
}

/// Runs one cell in this process and prints its pipelined rate: what the parent reads from a child.
pub fn child(name: &str) {
    let dev = Device::default();
    let cell = Cell::parse(name).expect("a cell name");
    let cfg = Config::from_env(Vec::new(), BATCH);
    let m = measure_cell(&dev, &cfg, cell);
    println!("{:.1}", cell.rate(m.pipelined));
}

fn fresh(cell: Cell) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe).args(["steady-cell", &cell.name()]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

pub fn run(dev: &Device, cfg: &Config) -> bool {
    println!("\n## lazor steady-speed benchmark\n");
    println!(
        "- device: {}; `Device::default()` for the whole sequence, twice; {}; pipelined = x{BATCH} realizes then \
         `synchronize()`, synced = `synchronize()` after every realize, kernels = GPU time of the kernels \
         (timestamps), allocated = buffers created per pipelined batch; rates in GB/s (products: TFLOP/s)\n",
        dev.name(),
        cfg.method()
    );
    let cells = sequence(dev.max_tensor_bytes());
    let mut passes = Vec::new();
    for _ in 0..2 {
        passes.push(cells.iter().map(|&c| measure_cell(dev, cfg, c)).collect::<Vec<_>>());
    }
    println!(
        "| case | pass 1 | pass 2 | pass 2 synced | pass 2 kernels | fresh process | pass 2 / fresh | allocated | \
         host / wait us (pass 1) | live / pooled GiB (pass 1) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, &cell) in cells.iter().enumerate() {
        let (p1, p2) = (&passes[0][i], &passes[1][i]);
        let fresh = fresh(cell);
        let r2 = cell.rate(p2.pipelined);
        println!(
            "| {} | {:.1} | {r2:.1} | {:.1} | {} | {} | {} | {:.1} | {:.0} / {:.0} | {:.1} / {:.1} |",
            cell.name(),
            cell.rate(p1.pipelined),
            cell.rate(p2.synced),
            p2.kernels.map_or("-".into(), |k| format!("{:.1}", cell.rate(k))),
            fresh.map_or("-".into(), |f| format!("{f:.1}")),
            fresh.map_or("-".into(), |f| format!("{:.2}", r2 / f)),
            p2.allocated,
            p1.host * 1e6,
            p1.wait * 1e6,
            p1.live as f64 / (1u64 << 30) as f64,
            p1.pooled as f64 / (1u64 << 30) as f64
        );
    }
    true
}
