//! The demo's data set, made here (nothing to download): 16 x 16 images of ten shapes (bars, diagonals, a frame, a
//! block, a cross, dots), each shifted by up to 2 pixels and drawn over noise. Deterministic for a seed.

/// Pixels per image.
pub const PIXELS: usize = 256;
/// Classes.
pub const CLASSES: usize = 10;
/// The side of an image.
const SIDE: i32 = 16;

/// Images (row-major, values in [0, 1]) and their classes.
pub struct Set {
    pub images: Vec<f32>,
    pub labels: Vec<i32>,
}

impl Set {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
}

/// xorshift64*: a small deterministic generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() >> 33) as usize % n
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Whether pixel (r, c) is on class `class`'s shape, drawn at its home place.
fn on_shape(class: usize, r: i32, c: i32) -> bool {
    match class {
        0 => (3..5).contains(&r) && (2..14).contains(&c),
        1 => (11..13).contains(&r) && (2..14).contains(&c),
        2 => (3..5).contains(&c) && (2..14).contains(&r),
        3 => (11..13).contains(&c) && (2..14).contains(&r),
        4 => (r - c).abs() <= 1 && (2..14).contains(&r),
        5 => (r + c - 15).abs() <= 1 && (2..14).contains(&r),
        6 => (4..12).contains(&r) && (4..12).contains(&c) && !((6..10).contains(&r) && (6..10).contains(&c)),
        7 => (5..11).contains(&r) && (5..11).contains(&c),
        8 => ((7..9).contains(&r) && (3..13).contains(&c)) || ((7..9).contains(&c) && (3..13).contains(&r)),
        _ => [(4, 4), (4, 11), (11, 4), (11, 11)].iter().any(|&(y, x)| (r - y).abs() <= 1 && (c - x).abs() <= 1),
    }
}

/// `n` images of random classes.
pub fn make(n: usize, rng: &mut Rng) -> Set {
    let mut set = Set { images: Vec::with_capacity(n * PIXELS), labels: Vec::with_capacity(n) };
    for _ in 0..n {
        let class = rng.below(CLASSES);
        let (dr, dc) = (rng.below(5) as i32 - 2, rng.below(5) as i32 - 2);
        for r in 0..SIDE {
            for c in 0..SIDE {
                let noise = 0.35 * rng.unit();
                set.images.push(if on_shape(class, r - dr, c - dc) { 0.6 + noise } else { noise });
            }
        }
        set.labels.push(class as i32);
    }
    set
}
