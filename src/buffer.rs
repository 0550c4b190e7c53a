//! `BufferKey`: the name of a device buffer. Backends own the buffers; the graph stores the key of a realized
//! node's buffer, and a job binds the plan's slots to keys. Neither side needs the other to name one.

slotmap::new_key_type! {
    /// A device buffer owned by a backend's pool; the graph only stores the key.
    pub struct BufferKey;
}
