//! The clock section: chain3 batches after the GPU sat idle and after a second of steady work, each beside the SM
//! clock `nvidia-smi` reads right after it, then many batches back to back with the outliers counted. It shows what
//! slowed cases inside a long process (issue 24): the driver's clock, not lazor's buffers; and whether any
//! pipelined batch still runs late at full clock.

use crate::timing::{abc, gbs};
use lazor::Device;
use std::time::{Duration, Instant};

/// The SM clock in MHz as `nvidia-smi` reports it, or `-` where there is none.
fn sm_clock() -> String {
    std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=clocks.sm", "--format=csv,noheader,nounits"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "-".into(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Runs the section on `dev` with chain3 over `n` elements; `false` where a realize fails.
pub fn run(dev: &Device, n: usize) -> bool {
    println!("\n## lazor clock probe\n");
    println!(
        "- device: {}; chain3 over 2^{} f32 elements, x8 realizes then `synchronize()` per batch; SM clock read by \
         `nvidia-smi` after each batch",
        dev.name(),
        n.trailing_zeros()
    );
    println!();
    println!("| phase | batch | ms per realize | GB/s | SM clock (MHz) |");
    println!("|---|---:|---:|---:|---:|");
    let [a, b, c] = abc(dev, n);
    let batch = || -> Option<Duration> {
        let t = Instant::now();
        for _ in 0..8 {
            (((&a + &b) * 5.0 - &c) / 2.0).realize().ok()?;
        }
        dev.synchronize().ok()?;
        Some(t.elapsed() / 8)
    };
    for (phase, idle, work) in [("after 3 s idle", 3000, 0), ("after 1.5 s of steady work", 0, 1500)] {
        std::thread::sleep(Duration::from_millis(idle));
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(work) {
            if batch().is_none() {
                return false;
            }
        }
        for i in 1..=6 {
            let Some(t) = batch() else { return false };
            println!(
                "| {phase} | {i} | {:.3} | {:.0} | {} |",
                t.as_secs_f64() * 1e3,
                gbs(16 * n as u64, t),
                sm_clock()
            );
        }
    }
    // Outliers at full clock: many batches back to back, none waiting on `nvidia-smi` in between.
    let mut times = Vec::with_capacity(OUTLIER_BATCHES);
    for _ in 0..OUTLIER_BATCHES {
        let Some(t) = batch() else { return false };
        times.push(t);
    }
    times.sort();
    let median = times[times.len() / 2];
    let slow = times.iter().filter(|&&t| t > 2 * median).count();
    println!(
        "\n- {OUTLIER_BATCHES} more batches back to back: median {:.3} ms per realize, slowest {:.3}, {slow} over twice the \
         median; SM clock after them {} MHz",
        median.as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        sm_clock()
    );
    true
}

/// Batches timed back to back for the outlier count.
const OUTLIER_BATCHES: usize = 64;
