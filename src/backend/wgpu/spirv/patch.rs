//! Word-level edits of a SPIR-V module naga wrote: what Vulkan can say and WGSL cannot (bf16 operands, exact
//! arithmetic). Each edit checks the module is the shape it expects and refuses otherwise, so a module it does not
//! understand goes back to the WGSL path instead of reaching the driver half-edited.

/// Opcodes this file reads or writes (SPIR-V 1.6 unified specification, section 3.52).
mod op {
    pub const NAME: u16 = 5;
    pub const EXTENSION: u16 = 10;
    pub const EXT_INST_IMPORT: u16 = 11;
    pub const EXT_INST: u16 = 12;
    pub const CONSTANT: u16 = 43;
    pub const CAPABILITY: u16 = 17;
    pub const TYPE_FLOAT: u16 = 22;
    pub const TYPE_VECTOR: u16 = 23;
    pub const DECORATE: u16 = 71;
    pub const MEMBER_DECORATE: u16 = 72;
    pub const LOAD: u16 = 61;
    pub const STORE: u16 = 62;
    pub const ACCESS_CHAIN: u16 = 65;
    pub const COMPOSITE_CONSTRUCT: u16 = 80;
    pub const COMPOSITE_EXTRACT: u16 = 81;
    pub const COMPOSITE_INSERT: u16 = 82;
    pub const BITCAST: u16 = 124;
    pub const F_CONVERT: u16 = 115;
    pub const VARIABLE: u16 = 59;
    pub const FUNCTION: u16 = 54;
    pub const FUNCTION_PARAMETER: u16 = 55;
    pub const FUNCTION_CALL: u16 = 57;
    pub const CONSTANT_NULL: u16 = 46;
    pub const TYPE_ARRAY: u16 = 28;
    pub const TYPE_POINTER: u16 = 32;
    pub const TYPE_COOP_MATRIX: u16 = 4456;
    pub const COOP_MATRIX_LOAD: u16 = 4457;
    pub const COOP_MATRIX_STORE: u16 = 4458;
    pub const COOP_MATRIX_MUL_ADD: u16 = 4459;
    /// Float arithmetic whose result a driver may fuse with another (`a * b + c` into one rounding).
    pub const CONTRACTIBLE: [u16; 9] = [127, 129, 131, 133, 136, 140, 141, 142, 148];
}

/// GLSL.std.450's `UnpackHalf2x16` (WGSL's `unpack2x16float`).
const UNPACK_HALF_2X16: u32 = 62;
/// Capabilities and decorations used here.
const CAP_BF16_TYPE: u32 = 5116;
const CAP_BF16_COOP: u32 = 5118;
const FP_ENCODING_BF16: u32 = 0;
const DECORATION_NO_CONTRACTION: u32 = 42;
/// The header's words: magic, version, generator, bound, schema.
const HEADER: usize = 5;

/// One instruction's place in the word stream.
#[derive(Clone, Copy)]
struct Inst {
    at: usize,
    len: usize,
    opcode: u16,
}

/// The instructions of `words` after the header.
fn instructions(words: &[u32]) -> Result<Vec<Inst>, String> {
    if words.len() < HEADER || words[0] != 0x0723_0203 {
        return Err("not a SPIR-V module".into());
    }
    let mut out = Vec::new();
    let mut at = HEADER;
    while at < words.len() {
        let (len, opcode) = ((words[at] >> 16) as usize, (words[at] & 0xffff) as u16);
        if len == 0 || at + len > words.len() {
            return Err(format!("a malformed instruction at word {at}"));
        }
        out.push(Inst { at, len, opcode });
        at += len;
    }
    Ok(out)
}

fn encode(opcode: u16, operands: &[u32]) -> Vec<u32> {
    let mut v = vec![((operands.len() as u32 + 1) << 16) | opcode as u32];
    v.extend_from_slice(operands);
    v
}

/// A string operand: UTF-8, nul-terminated, padded to whole words.
fn string_words(s: &str) -> Vec<u32> {
    let mut bytes = s.as_bytes().to_vec();
    bytes.push(0);
    while bytes.len() % 4 != 0 {
        bytes.push(0);
    }
    bytes.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Rebuilds `words` with `insert` (word position, words to put there) applied; positions ascending.
fn splice(words: &[u32], mut insert: Vec<(usize, Vec<u32>)>) -> Vec<u32> {
    insert.sort_by_key(|(at, _)| *at);
    let mut out = Vec::with_capacity(words.len() + insert.iter().map(|(_, w)| w.len()).sum::<usize>());
    let mut from = 0;
    for (at, w) in insert {
        out.extend_from_slice(&words[from..at]);
        out.extend_from_slice(&w);
        from = at;
    }
    out.extend_from_slice(&words[from..]);
    out
}

/// Makes every 16-bit float of the module a bfloat16: the kernel was written with `f16` standing for bf16 bits
/// (`codegen::matmul`'s tensor-core kernel for bf16 operands), so retyping the one `OpTypeFloat 16` retypes its
/// workgroup slabs and its cooperative matrices A and B together.
///
/// # Errors
/// Where the module has no 16-bit float, or does anything with one but move or convert it (load, store, bitcast,
/// compose, convert, pass to or return from a function, cooperative load and multiply-add): bf16 has no
/// arithmetic, and an f16 computation must not be silently retyped. (A conversion to f16 becomes one to bf16: the
/// kernel converts values that are bf16 already; [`words_as_bits`] goes first, so staged words are not converted.)
pub fn bf16(words: &[u32]) -> Result<Vec<u32>, String> {
    let insts = instructions(words)?;
    let half = half_type(words, &insts)?;
    let half_id = words[half.at + 1];
    let halfish = built_on(words, &insts, half_id);
    // Every instruction with a result of such a type must only move bits.
    let moves = [
        op::LOAD,
        op::STORE,
        op::ACCESS_CHAIN,
        op::COMPOSITE_CONSTRUCT,
        op::COMPOSITE_EXTRACT,
        op::COMPOSITE_INSERT,
        op::BITCAST,
        op::F_CONVERT,
        op::VARIABLE,
        op::FUNCTION,
        op::FUNCTION_PARAMETER,
        op::FUNCTION_CALL,
        op::CONSTANT_NULL,
        op::COOP_MATRIX_LOAD,
        op::COOP_MATRIX_STORE,
        op::COOP_MATRIX_MUL_ADD,
    ];
    let types = [op::TYPE_FLOAT, op::TYPE_VECTOR, op::TYPE_ARRAY, op::TYPE_POINTER, op::TYPE_COOP_MATRIX];
    for i in &insts {
        let names = [op::NAME, op::DECORATE, op::MEMBER_DECORATE];
        if types.contains(&i.opcode) || i.len < 3 || moves.contains(&i.opcode) || names.contains(&i.opcode) {
            continue;
        }
        if halfish.contains(&words[i.at + 1]) {
            return Err(format!("opcode {} computes with a 16-bit float; bf16 has no arithmetic", i.opcode));
        }
    }
    let mut out = words.to_vec();
    // `OpTypeFloat %id 16` -> `OpTypeFloat %id 16 BFloat16KHR`, in place of the old one.
    let typed = encode(op::TYPE_FLOAT, &[half_id, 16, FP_ENCODING_BF16]);
    out.splice(half.at..half.at + 3, typed);
    let caps = encode(op::CAPABILITY, &[CAP_BF16_TYPE])
        .into_iter()
        .chain(encode(op::CAPABILITY, &[CAP_BF16_COOP]))
        .chain(encode(op::EXTENSION, &string_words("SPV_KHR_bfloat16")))
        .collect();
    // Capabilities come first after the header, extensions right after them: both go after the last capability.
    let after_caps = insts.iter().filter(|i| i.opcode == op::CAPABILITY).map(|i| i.at + i.len).max().unwrap_or(HEADER);
    Ok(splice(&out, vec![(after_caps, caps)]))
}

/// The module's one 16-bit float type (naga declares each type once).
fn half_type<'a>(words: &[u32], insts: &'a [Inst]) -> Result<&'a Inst, String> {
    let half: Vec<&Inst> =
        insts.iter().filter(|i| i.opcode == op::TYPE_FLOAT && i.len == 3 && words[i.at + 2] == 16).collect();
    let [half] = half[..] else { return Err("no 16-bit float type".into()) };
    Ok(half)
}

/// The types built on type `base` (vectors, arrays, pointers, matrices), transitively, and `base` itself: naga
/// declares a type before its use.
fn built_on(words: &[u32], insts: &[Inst], base: u32) -> std::collections::HashSet<u32> {
    let mut set = std::collections::HashSet::from([base]);
    for i in insts {
        let w = &words[i.at..i.at + i.len];
        let on = match i.opcode {
            op::TYPE_VECTOR | op::TYPE_ARRAY | op::TYPE_COOP_MATRIX => Some(w[2]),
            op::TYPE_POINTER => Some(w[3]),
            _ => None,
        };
        if on.is_some_and(|t| set.contains(&t)) {
            set.insert(w[1]);
        }
    }
    set
}

/// Turns each pair of halves made from a word's bits (`vec2<f16>(unpack2x16float(x))`: an `UnpackHalf2x16`
/// converted to a half type) into those bits as they are (`OpBitcast`, in place: the same length), with no
/// conversion instruction. For f16 the values are the same. For bf16 (`strict`, before [`bf16`] retypes the
/// module) it is what makes them right: the kernel's words hold bf16 bits (`codegen::matmul` stages them so),
/// which unpacked and converted would be read as f16.
///
/// # Errors
/// Where the module has no 16-bit float; with `strict`, also where an unpacked pair is used any other way (it
/// would be read as f16): the module is not the shape this edit expects. Without it other reads stay, as a
/// checked octet's in an f16 kernel.
pub fn words_as_bits(words: &[u32], strict: bool) -> Result<Vec<u32>, String> {
    let insts = instructions(words)?;
    let halfish = built_on(words, &insts, words[half_type(words, &insts)?.at + 1]);
    let mut out = words.to_vec();
    let glsl: Vec<u32> = insts
        .iter()
        .filter(|i| {
            i.opcode == op::EXT_INST_IMPORT && words[i.at + 2..i.at + i.len] == string_words("GLSL.std.450")[..]
        })
        .map(|i| words[i.at + 1])
        .collect();
    // Each unpack's result and the word it unpacks.
    let unpacked: crate::hash::FastMap<u32, u32> = insts
        .iter()
        .filter(|i| i.opcode == op::EXT_INST && i.len == 6)
        .filter(|i| glsl.contains(&words[i.at + 3]) && words[i.at + 4] == UNPACK_HALF_2X16)
        .map(|i| (words[i.at + 2], words[i.at + 5]))
        .collect();
    for i in &insts {
        let w = &mut out[i.at..i.at + i.len];
        if i.opcode == op::F_CONVERT && i.len == 4 && halfish.contains(&w[1]) {
            if let Some(&word) = unpacked.get(&w[3]) {
                w[0] = (4 << 16) | u32::from(op::BITCAST);
                w[3] = word;
            }
        }
    }
    if strict {
        // Nothing else may read an unpacked pair: ids among the operands of everything but declarations, names and
        // decorations.
        let skip = [op::NAME, op::DECORATE, op::MEMBER_DECORATE, op::CONSTANT, op::EXT_INST_IMPORT];
        for i in insts.iter().filter(|i| !skip.contains(&i.opcode) && !(19..=39).contains(&i.opcode)) {
            let operands = if i.opcode == op::EXT_INST { i.at + 5 } else { i.at + 1 };
            if let Some(id) = out[operands..i.at + i.len].iter().find(|w| unpacked.contains_key(w)) {
                return Err(format!("an unpacked pair %{id} is read by opcode {}, not converted to halves", i.opcode));
            }
        }
    }
    Ok(out)
}

/// Decorates every float operation's result `NoContraction`, so the driver rounds each as written (no fused
/// multiply-add): the kernel then computes what the CPU backend's IEEE arithmetic does, operation by operation.
///
/// # Errors
/// Where `words` is not a SPIR-V module.
pub fn no_contraction(words: &[u32]) -> Result<Vec<u32>, String> {
    let insts = instructions(words)?;
    let decorations: Vec<u32> = insts
        .iter()
        .filter(|i| op::CONTRACTIBLE.contains(&i.opcode) && i.len >= 3)
        .flat_map(|i| encode(op::DECORATE, &[words[i.at + 2], DECORATION_NO_CONTRACTION]))
        .collect();
    if decorations.is_empty() {
        return Ok(words.to_vec());
    }
    // Annotations sit after the debug names and before the first type: after the last name or decoration.
    let anchor = insts
        .iter()
        .filter(|i| matches!(i.opcode, op::NAME | 6 | 7 | op::DECORATE | op::MEMBER_DECORATE))
        .map(|i| i.at + i.len)
        .max()
        .or_else(|| insts.iter().find(|i| (19..=39).contains(&i.opcode)).map(|i| i.at))
        .ok_or("a module without types")?;
    Ok(splice(words, vec![(anchor, decorations)]))
}

/// The opcodes of `words`, in order (for tests).
#[cfg(test)]
pub fn opcodes(words: &[u32]) -> Vec<(u16, Vec<u32>)> {
    instructions(words).unwrap().iter().map(|i| (i.opcode, words[i.at + 1..i.at + i.len].to_vec())).collect()
}
