//! Decoding: the PTX text into instructions with numbered registers, resolved labels
//! and parsed operands.

use std::collections::HashMap;

#[derive(Clone, Debug)]
pub(crate) enum Src {
    Reg(usize),
    /// A negated predicate (`!%p3`).
    Not(usize),
    Imm(u64),
    Special(&'static str),
    Smem,
    /// The address of a kernel parameter by name (`mov.u64 %rd, tmap0`).
    Param(String),
}

#[derive(Clone, Debug)]
pub(crate) enum Opd {
    Src(Src),
    Mem {
        base: Option<usize>,
        param: Option<String>,
        offset: i64,
    },
    Vec(Vec<Src>),
    Label(usize),
    /// `[map, {c0, c1, ...}]`: a tensor map and box coordinates (TMA copies).
    Tensor {
        map: Src,
        coords: Vec<Src>,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Ins {
    pub(crate) line: usize,
    pub(crate) pred: Option<(usize, bool)>,
    pub(crate) op: Vec<String>,
    pub(crate) args: Vec<Opd>,
}

pub(crate) struct Module {
    pub(crate) code: Vec<Ins>,
    pub(crate) regs: usize,
    /// Register names, for messages.
    pub(crate) names: Vec<String>,
    pub(crate) params: Vec<String>,
}

fn parse_imm(t: &str) -> Option<u64> {
    if let Some(h) = t.strip_prefix("0f") {
        return u32::from_str_radix(h, 16).ok().map(|v| v as u64);
    }
    if let Some(h) = t.strip_prefix("0d") {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Some(h) = t.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    t.parse::<i64>().ok().map(|v| v as u64)
}

pub(crate) fn parse(ptx: &str) -> Result<Module, String> {
    let mut params = Vec::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    let mut raw: Vec<(usize, String)> = Vec::new();
    let mut in_body = false;
    for (n, line) in ptx.lines().enumerate() {
        let t = line.trim();
        if t.starts_with(".param") {
            let name = t.trim_end_matches(',').rsplit(' ').next().unwrap();
            // `.param .align 64 .b8 tmap0[128]`: the name without its array extent.
            params.push(name.split('[').next().unwrap_or(name).to_string());
            continue;
        }
        if t == "{" {
            in_body = true;
            continue;
        }
        if !in_body || t.is_empty() || t.starts_with("//") || t.starts_with(".reg") || t == "}" {
            continue;
        }
        if let Some(l) = t.strip_suffix(':') {
            labels.insert(l.to_string(), raw.len());
            continue;
        }
        raw.push((n + 1, t.trim_end_matches(';').to_string()));
    }
    let mut regs = Regs::default();
    let mut code = Vec::new();
    for (line, text) in raw {
        let mut rest = text.as_str();
        let mut pred = None;
        if let Some(p) = rest.strip_prefix('@') {
            let (p, r) = p.split_once(' ').ok_or(format!("line {line}: bad predicate"))?;
            let (neg, name) = match p.strip_prefix('!') {
                Some(n) => (true, n),
                None => (false, p),
            };
            pred = Some((regs.get(name), neg));
            rest = r.trim();
        }
        let (opcode, operands) = rest.split_once(' ').unwrap_or((rest, ""));
        let op: Vec<String> = opcode.split('.').map(String::from).collect();
        let mut args = Vec::new();
        let mut buf = String::new();
        let mut depth = 0;
        let mut pieces = Vec::new();
        for ch in operands.chars() {
            match ch {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    pieces.push(buf.trim().to_string());
                    buf.clear();
                    continue;
                }
                _ => {}
            }
            buf.push(ch);
        }
        if !buf.trim().is_empty() {
            pieces.push(buf.trim().to_string());
        }
        for p in pieces {
            if let Some((map, coords)) = p
                .strip_prefix('[')
                .and_then(|x| x.strip_suffix("}]"))
                .and_then(|x| x.split_once(", {").or_else(|| x.split_once(",{")))
            {
                let map = source(map, &mut regs, line)?;
                let coords = coords.split(',').map(|x| source(x, &mut regs, line)).collect::<Result<_, _>>()?;
                args.push(Opd::Tensor { map, coords });
            } else if let Some(inner) = p.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
                let (base, offset) = match inner.split_once('+') {
                    Some((b, o)) => (b.trim(), o.trim().parse::<i64>().map_err(|_| format!("line {line}: {p}"))?),
                    None => (inner.trim(), 0),
                };
                if base.starts_with('%') {
                    args.push(Opd::Mem { base: Some(regs.get(base)), param: None, offset });
                } else {
                    args.push(Opd::Mem { base: None, param: Some(base.to_string()), offset });
                }
            } else if let Some(inner) = p.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
                let v = inner.split(',').map(|x| source(x, &mut regs, line)).collect::<Result<_, _>>()?;
                args.push(Opd::Vec(v));
            } else if p.starts_with('$') {
                args.push(Opd::Label(*labels.get(&p).ok_or(format!("line {line}: no label {p}"))?));
            } else {
                args.push(Opd::Src(source(&p, &mut regs, line)?));
            }
        }
        code.push(Ins { line, pred, op, args });
    }
    Ok(Module { code, regs: regs.names.len(), names: regs.names, params })
}

#[derive(Default)]
struct Regs {
    index: HashMap<String, usize>,
    names: Vec<String>,
}

impl Regs {
    fn get(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }
}

fn source(t: &str, regs: &mut Regs, line: usize) -> Result<Src, String> {
    let t = t.trim();
    Ok(match t {
        "%tid.x" => Src::Special("tid"),
        "%ctaid.x" => Src::Special("ctaid.x"),
        "%ctaid.y" => Src::Special("ctaid.y"),
        "%ctaid.z" => Src::Special("ctaid.z"),
        "%nctaid.x" => Src::Special("nctaid.x"),
        "%nctaid.y" => Src::Special("nctaid.y"),
        "%nctaid.z" => Src::Special("nctaid.z"),
        "%cluster_ctaid.x" => Src::Special("cluster_ctaid.x"),
        "%cluster_ctaid.y" => Src::Special("cluster_ctaid.y"),
        "%cluster_ctaid.z" => Src::Special("cluster_ctaid.z"),
        "%cluster_nctaid.x" => Src::Special("cluster_nctaid.x"),
        "%cluster_nctaid.y" => Src::Special("cluster_nctaid.y"),
        "%cluster_nctaid.z" => Src::Special("cluster_nctaid.z"),
        "%cluster_ctarank" => Src::Special("cluster_ctarank"),
        "%laneid" => Src::Special("laneid"),
        // The sink operand (`mbarrier.arrive... _, [addr]`).
        "_" => Src::Imm(0),
        "tessera_smem" => Src::Smem,
        _ if t.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) && !t.contains('.') => Src::Param(t.to_string()),
        _ if t.starts_with("!%") => Src::Not(regs.get(&t[1..])),
        _ if t.starts_with('%') => Src::Reg(regs.get(t)),
        _ => Src::Imm(parse_imm(t).ok_or(format!("line {line}: operand `{t}`"))?),
    })
}
