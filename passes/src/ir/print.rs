//! The MLIR-flavoured printer: deterministic text with `loc(...)` on every op line, and a
//! map from printed lines to locations (the explorer and the LSP's IR previews use it).

use std::collections::HashMap;
use std::fmt::Write;

use super::*;

/// Turns a `Loc` into `(path, line, column)`, all 1-based.
pub trait LocResolver {
    fn resolve(&self, loc: &Loc) -> Option<(String, u32, u32)>;
}

/// A resolver that knows nothing (prints `loc(unknown)`), for tests of pure IR.
pub struct NoLocs;

impl LocResolver for NoLocs {
    fn resolve(&self, _: &Loc) -> Option<(String, u32, u32)> {
        None
    }
}

/// Printed IR: the text and, per line, the location of the op printed on it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Printed {
    pub text: String,
    pub lines: Vec<Option<Loc>>,
}

struct Printer<'a> {
    func: &'a Func,
    locs: &'a dyn LocResolver,
    names: HashMap<ValueId, String>,
    used: HashMap<String, u32>,
    next_number: u32,
    out: String,
    lines: Vec<Option<Loc>>,
}

pub fn print_func(func: &Func, locs: &dyn LocResolver) -> Printed {
    let mut p = Printer {
        func,
        locs,
        names: HashMap::new(),
        used: HashMap::new(),
        next_number: 0,
        out: String::new(),
        lines: Vec::new(),
    };
    p.func_header();
    p.region_body(&func.body, 1);
    p.line("}", Some(func.loc.clone()));
    Printed { text: p.out, lines: p.lines }
}

impl Printer<'_> {
    fn line(&mut self, text: &str, loc: Option<Loc>) {
        self.out.push_str(text);
        self.out.push('\n');
        self.lines.push(loc);
    }

    fn loc(&self, loc: &Loc) -> String {
        match self.locs.resolve(loc) {
            Some((path, line, col)) => format!("loc(\"{path}\":{line}:{col})"),
            None => "loc(unknown)".to_string(),
        }
    }

    /// Names a value on definition: its source name (deduplicated) or the next number.
    fn define(&mut self, v: ValueId) -> String {
        let info = &self.func.values[v.0 as usize];
        let name = match &info.name {
            Some(n) if !n.is_empty() => {
                let base = sanitize(n);
                let count = self.used.entry(base.clone()).or_insert(0);
                *count += 1;
                if *count == 1 {
                    format!("%{base}")
                } else {
                    format!("%{base}_{}", *count - 1)
                }
            }
            _ => {
                let n = self.next_number;
                self.next_number += 1;
                format!("%{n}")
            }
        };
        self.names.insert(v, name.clone());
        name
    }

    fn use_(&self, v: ValueId) -> String {
        self.names.get(&v).cloned().unwrap_or_else(|| format!("%<undefined {}>", v.0))
    }

    fn ty(&self, v: ValueId) -> String {
        self.func.ty(v).to_string()
    }

    fn func_header(&mut self) {
        let mut params = Vec::new();
        for &p in &self.func.params.clone() {
            let name = self.define(p);
            params.push(format!("{name}: {}", self.ty(p)));
        }
        let mut attrs = vec![format!(
            "kind = \"{}\"",
            match self.func.kind {
                FuncKind::Kernel => "kernel",
                FuncKind::Graph => "graph",
            }
        )];
        attrs.extend(self.func.attrs.iter().map(|(k, v)| format!("{k} = {}", attr(v))));
        let header = format!(
            "func.func @{}({}) attributes {{{}}} {{ // {}",
            self.func.name,
            params.join(", "),
            attrs.join(", "),
            self.loc(&self.func.loc)
        );
        self.line(&header, Some(self.func.loc.clone()));
    }

    fn region_body(&mut self, region: &Region, depth: usize) {
        for &op in &region.ops {
            self.op(op, depth);
        }
    }

    fn op(&mut self, id: OpId, depth: usize) {
        let op = self.func.op(id).clone();
        let indent = "  ".repeat(depth);
        let loc = self.loc(&op.loc);
        match op.kind {
            OpKind::For | OpKind::GridParallel => {
                let [lo, hi, step] = [op.operands[0], op.operands[1], op.operands[2]];
                let region = &op.regions[0];
                let iv = self.define(region.args[0]);
                let inits: Vec<ValueId> = op.operands[3..].to_vec();
                let mut head = String::new();
                if !op.results.is_empty() {
                    let results: Vec<String> = op.results.iter().map(|&r| self.define(r)).collect();
                    write!(head, "{} = ", results.join(", ")).unwrap();
                }
                write!(
                    head,
                    "{} {iv} = {} to {} step {}",
                    op.kind.name(),
                    self.use_(lo),
                    self.use_(hi),
                    self.use_(step)
                )
                .unwrap();
                if !inits.is_empty() {
                    let pairs: Vec<String> = region.args[1..]
                        .iter()
                        .zip(&inits)
                        .map(|(&a, &i)| {
                            let name = self.define(a);
                            format!("{name} = {}", self.use_(i))
                        })
                        .collect();
                    let tys: Vec<String> = op.results.iter().map(|&r| self.ty(r)).collect();
                    write!(head, " iter_args({}) -> ({})", pairs.join(", "), tys.join(", ")).unwrap();
                }
                if !op.attrs.is_empty() {
                    write!(head, " {}", attrs(&op.attrs)).unwrap();
                }
                self.line(&format!("{indent}{head} {{ {loc}"), Some(op.loc.clone()));
                self.region_body(&op.regions[0].clone(), depth + 1);
                self.line(&format!("{indent}}}"), Some(op.loc.clone()));
            }
            OpKind::If => {
                let mut head = String::new();
                if !op.results.is_empty() {
                    let results: Vec<String> = op.results.iter().map(|&r| self.define(r)).collect();
                    write!(head, "{} = ", results.join(", ")).unwrap();
                }
                write!(head, "scf.if {}", self.use_(op.operands[0])).unwrap();
                if !op.results.is_empty() {
                    let tys: Vec<String> = op.results.iter().map(|&r| self.ty(r)).collect();
                    write!(head, " -> ({})", tys.join(", ")).unwrap();
                }
                if !op.attrs.is_empty() {
                    write!(head, " {}", attrs(&op.attrs)).unwrap();
                }
                self.line(&format!("{indent}{head} {{ {loc}"), Some(op.loc.clone()));
                self.region_body(&op.regions[0].clone(), depth + 1);
                if op.regions.len() > 1 && !op.regions[1].ops.is_empty() {
                    self.line(&format!("{indent}}} else {{"), Some(op.loc.clone()));
                    self.region_body(&op.regions[1].clone(), depth + 1);
                }
                self.line(&format!("{indent}}}"), Some(op.loc.clone()));
            }
            _ => {
                let operands: Vec<String> = op.operands.iter().map(|&o| self.use_(o)).collect();
                let results: Vec<String> = op.results.iter().map(|&r| self.define(r)).collect();
                let mut text = String::new();
                if !results.is_empty() {
                    write!(text, "{} = ", results.join(", ")).unwrap();
                }
                text.push_str(op.kind.name());
                if op.kind == OpKind::Constant {
                    if let Some((_, v)) = op.attrs.iter().find(|(k, _)| *k == "value") {
                        write!(text, " {}", attr(v)).unwrap();
                    }
                } else if !operands.is_empty() {
                    write!(text, " {}", operands.join(", ")).unwrap();
                }
                let shown: Vec<(&'static str, Attr)> =
                    op.attrs.iter().filter(|(k, _)| !(op.kind == OpKind::Constant && *k == "value")).cloned().collect();
                if !shown.is_empty() {
                    write!(text, " {}", attrs(&shown)).unwrap();
                }
                let in_tys: Vec<String> = op.operands.iter().map(|&o| self.ty(o)).collect();
                let out_tys: Vec<String> = op.results.iter().map(|&r| self.ty(r)).collect();
                if !in_tys.is_empty() || !out_tys.is_empty() {
                    text.push_str(" : ");
                    if op.kind == OpKind::Constant {
                        text.push_str(&out_tys.join(", "));
                    } else {
                        text.push_str(&in_tys.join(", "));
                        if !out_tys.is_empty() {
                            if !in_tys.is_empty() {
                                text.push_str(" -> ");
                            }
                            text.push_str(&out_tys.join(", "));
                        }
                    }
                }
                if op.regions.is_empty() {
                    self.line(&format!("{indent}{text} {loc}"), Some(op.loc.clone()));
                } else {
                    self.line(&format!("{indent}{text} {{ {loc}"), Some(op.loc.clone()));
                    for (i, region) in op.regions.clone().iter().enumerate() {
                        if i > 0 {
                            self.line(&format!("{indent}}} {{"), Some(op.loc.clone()));
                        }
                        let args: Vec<String> = region
                            .args
                            .iter()
                            .map(|&a| {
                                let n = self.define(a);
                                format!("{n}: {}", self.ty(a))
                            })
                            .collect();
                        if !args.is_empty() {
                            self.line(&format!("{indent}^bb({}):", args.join(", ")), Some(op.loc.clone()));
                        }
                        self.region_body(region, depth + 1);
                    }
                    self.line(&format!("{indent}}}"), Some(op.loc.clone()));
                }
            }
        }
    }
}

fn sanitize(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("v{s}")
    } else {
        s
    }
}

pub fn attr(a: &Attr) -> String {
    match a {
        Attr::Int(v) => v.to_string(),
        Attr::Float(b) => {
            let v = f64::from_bits(*b);
            if v.is_infinite() {
                if v > 0.0 {
                    "inf".into()
                } else {
                    "-inf".into()
                }
            } else if v.is_nan() {
                "nan".into()
            } else if v == v.trunc() && v.abs() < 1e15 {
                format!("{v:.1}")
            } else {
                format!("{v:e}")
            }
        }
        Attr::Bool(b) => b.to_string(),
        Attr::Str(s) => format!("\"{s}\""),
        Attr::DType(d) => d.to_string(),
        Attr::Ints(v) => format!("[{}]", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
        Attr::Dims(v) => format!("[{}]", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
        Attr::Layout(l) => l.to_string(),
    }
}

fn attrs(list: &[(&'static str, Attr)]) -> String {
    let parts: Vec<String> = list.iter().map(|(k, v)| format!("{k} = {}", attr(v))).collect();
    format!("{{{}}}", parts.join(", "))
}
