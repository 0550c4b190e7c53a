//! A one-shot value a callback sets, and the task it wakes then: how a future awaits wgpu's callbacks (a read-back
//! mapped, submitted work done), which in the browser run from the page's event loop.

use crate::error::lock;
use std::sync::{Arc, Mutex};
use std::task::Waker;

/// The value once set, and the task to wake when it is.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// A one-shot value shared between a callback (which [`Signal::set`]s it) and the code awaiting it.
pub(crate) struct Signal<T>(Arc<Mutex<Slot<T>>>);

impl<T> Clone for Signal<T> {
    fn clone(&self) -> Self {
        Signal(self.0.clone())
    }
}

impl<T> Default for Signal<T> {
    fn default() -> Self {
        Signal(Arc::new(Mutex::new(Slot { value: None, waker: None })))
    }
}

impl<T> Signal<T> {
    /// Sets the value and wakes the task waiting for it, if any (outside the lock).
    pub(crate) fn set(&self, value: T) {
        let waker = {
            let mut slot = lock(&self.0);
            slot.value = Some(value);
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether the value was set.
    pub(crate) fn is_set(&self) -> bool {
        lock(&self.0).value.is_some()
    }

    /// Takes the value, if it was set.
    pub(crate) fn take(&self) -> Option<T> {
        lock(&self.0).value.take()
    }

    /// Wakes `waker` once the value is set: now if it is, else from [`Signal::set`].
    pub(crate) fn wake_when_set(&self, waker: &Waker) {
        let mut slot = lock(&self.0);
        if slot.value.is_some() {
            waker.wake_by_ref();
        } else {
            slot.waker = Some(waker.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Signal;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn setting_wakes_the_waiting_task_once_and_a_late_waiter_at_once() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let s: Signal<u32> = Signal::default();
        s.wake_when_set(&waker);
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "nothing set yet");
        s.clone().set(7);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        s.wake_when_set(&waker);
        assert_eq!(count.0.load(Ordering::Relaxed), 2, "already set: woken at once");
        assert!(s.is_set());
        assert_eq!(s.take(), Some(7));
        assert!(!s.is_set());
    }
}
