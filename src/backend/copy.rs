//! Copying read-back words out to host memory: in parallel when large, so the copy and the page faults of fresh
//! memory spread over the cores instead of running at one core's speed.

/// Below this many words one core copies: a task costs more than it saves.
const PARALLEL_MIN: usize = 1 << 20;
/// Words per task (1 MiB).
const CHUNK: usize = 1 << 18;

/// Copies `src` into `dst` (of the same length).
pub(crate) fn copy(dst: &mut [u32], src: &[u32]) {
    assert_eq!(dst.len(), src.len(), "copy: lengths differ");
    if src.len() < PARALLEL_MIN {
        dst.copy_from_slice(src);
    } else {
        super::par::zip_chunks(dst, src, CHUNK, |d, s| d.copy_from_slice(s));
    }
}

/// `src` in a new vector, its pages first touched by the threads that copy into them.
pub(crate) fn to_vec(src: &[u32]) -> Vec<u32> {
    if src.len() < PARALLEL_MIN {
        return src.to_vec();
    }
    let mut out: Vec<u32> = Vec::with_capacity(src.len());
    super::par::zip_chunks(&mut out.spare_capacity_mut()[..src.len()], src, CHUNK, |d, s| {
        // SAFETY: `d` and `s` have the same length (equal chunking of equal lengths) and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr().cast::<u32>(), s.len()) }
    });
    // SAFETY: every element up to `src.len()` was written above.
    unsafe { out.set_len(src.len()) };
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_small_and_large() {
        for n in [0, 5, super::PARALLEL_MIN + super::CHUNK / 3] {
            let src: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
            assert_eq!(super::to_vec(&src), src);
            let mut dst = vec![0; n];
            super::copy(&mut dst, &src);
            assert_eq!(dst, src);
        }
    }
}
