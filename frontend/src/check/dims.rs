//! Symbolic dimensions: polynomials over symbols with integer coefficients.
//!
//! `"B*H"`, `"3*D"` and `"S+1"` are polynomials; `X // n` and `X % n` (n a constant or a
//! symbol) are opaque atoms, except that `n * (X // n)` normalizes to `X` and records
//! the obligation `X % n == 0` (LANGUAGE.md §4.1). Two dims are equal iff their normal
//! forms are equal.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use smol_str::SmolStr;

/// An indivisible factor of a monomial.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Atom {
    Sym(SmolStr),
    FloorDiv(Box<Dim>, Box<Dim>),
    Mod(Box<Dim>, Box<Dim>),
}

/// A product of atoms with positive powers, kept sorted.
pub type Mono = Vec<(Atom, u32)>;

/// A normalized polynomial. The canonical forms keep the common cases allocation-free:
/// a constant is `Const`, a lone symbol with coefficient 1 is `Sym`, anything else is a
/// sorted list of (monomial, non-zero coefficient) terms.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Const(i64),
    Sym(SmolStr),
    Poly(Arc<[(Mono, i64)]>),
}

impl Default for Dim {
    fn default() -> Dim {
        Dim::Const(0)
    }
}

/// `value % divisor == 0` must hold (checked statically when both are known).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Obligation {
    pub value: Dim,
    pub divisor: Dim,
}

/// The working form of a polynomial: monomial → coefficient.
type Terms = BTreeMap<Mono, i64>;

impl Dim {
    pub fn constant(value: i64) -> Dim {
        Dim::Const(value)
    }

    pub fn sym(name: &str) -> Dim {
        Dim::Sym(SmolStr::new(name))
    }

    fn atom(atom: Atom) -> Dim {
        match atom {
            Atom::Sym(s) => Dim::Sym(s),
            other => Dim::from_terms(BTreeMap::from([(vec![(other, 1)], 1)])),
        }
    }

    fn terms(&self) -> Terms {
        match self {
            Dim::Const(0) => BTreeMap::new(),
            Dim::Const(c) => BTreeMap::from([(Vec::new(), *c)]),
            Dim::Sym(s) => BTreeMap::from([(vec![(Atom::Sym(s.clone()), 1)], 1)]),
            Dim::Poly(t) => t.iter().cloned().collect(),
        }
    }

    fn from_terms(mut terms: Terms) -> Dim {
        terms.retain(|_, c| *c != 0);
        match terms.len() {
            0 => return Dim::Const(0),
            1 => {
                let (mono, coef) = terms.iter().next().unwrap();
                if mono.is_empty() {
                    return Dim::Const(*coef);
                }
                if *coef == 1 {
                    if let [(Atom::Sym(s), 1)] = mono.as_slice() {
                        return Dim::Sym(s.clone());
                    }
                }
            }
            _ => {}
        }
        Dim::Poly(terms.into_iter().collect::<Vec<_>>().into())
    }

    pub fn as_const(&self) -> Option<i64> {
        match self {
            Dim::Const(c) => Some(*c),
            _ => None,
        }
    }

    /// The symbol, if this dim is exactly one symbol.
    /// The normal form's terms: (monomial, non-zero coefficient), sorted; a constant is
    /// one term with an empty monomial (none for 0). How code that computes a dim at run
    /// time (`B*H`, `N//2`) walks it.
    pub fn monomials(&self) -> Vec<(Mono, i64)> {
        self.terms().into_iter().collect()
    }

    pub fn as_sym(&self) -> Option<&str> {
        match self {
            Dim::Sym(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_const(&self) -> bool {
        matches!(self, Dim::Const(_))
    }

    /// Every symbol that occurs in the dim (also inside opaque atoms).
    pub fn symbols(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<String>) {
        match self {
            Dim::Const(_) => {}
            Dim::Sym(s) => out.push(s.to_string()),
            Dim::Poly(terms) => {
                for (mono, _) in terms.iter() {
                    for (atom, _) in mono {
                        match atom {
                            Atom::Sym(s) => out.push(s.to_string()),
                            Atom::FloorDiv(a, b) | Atom::Mod(a, b) => {
                                a.collect_symbols(out);
                                b.collect_symbols(out);
                            }
                        }
                    }
                }
            }
        }
    }

    pub fn add(&self, other: &Dim) -> Dim {
        if let (Dim::Const(a), Dim::Const(b)) = (self, other) {
            return Dim::Const(a.saturating_add(*b));
        }
        if let Dim::Const(0) = other {
            return self.clone();
        }
        if let Dim::Const(0) = self {
            return other.clone();
        }
        let mut terms = self.terms();
        for (mono, coef) in other.terms() {
            let entry = terms.entry(mono).or_insert(0);
            *entry = entry.saturating_add(coef);
        }
        Dim::from_terms(terms)
    }

    pub fn neg(&self) -> Dim {
        match self {
            Dim::Const(c) => Dim::Const(c.saturating_neg()),
            _ => Dim::from_terms(self.terms().into_iter().map(|(m, c)| (m, c.saturating_neg())).collect()),
        }
    }

    pub fn sub(&self, other: &Dim) -> Dim {
        if self == other {
            return Dim::Const(0);
        }
        self.add(&other.neg())
    }

    /// Multiplication; `obligations` receives the divisibility facts that the
    /// `n*(X//n) → X` rule relies on.
    pub fn mul(&self, other: &Dim, obligations: &mut Vec<Obligation>) -> Dim {
        match (self, other) {
            (Dim::Const(a), Dim::Const(b)) => return Dim::Const(a.saturating_mul(*b)),
            (Dim::Const(0), _) | (_, Dim::Const(0)) => return Dim::Const(0),
            (Dim::Const(1), x) | (x, Dim::Const(1)) => return x.clone(),
            _ => {}
        }
        let mut out = Dim::Const(0);
        for (m1, c1) in self.terms() {
            for (m2, c2) in other.terms() {
                let term = multiply_monos(&m1, &m2);
                out = out.add(&simplify_term(term, c1.saturating_mul(c2), obligations));
            }
        }
        out
    }

    pub fn mul_plain(&self, other: &Dim) -> Dim {
        self.mul(other, &mut Vec::new())
    }

    /// Floor division: exact when every coefficient divides, folded for constants,
    /// otherwise an opaque atom.
    pub fn floor_div(&self, divisor: &Dim) -> Option<Dim> {
        if let Some(d) = divisor.as_const() {
            if d == 0 {
                return None;
            }
            if let Some(v) = self.as_const() {
                return Some(Dim::Const(crate::arith::floor_div_i64(v, d)));
            }
            if d == 1 {
                return Some(self.clone());
            }
            let terms = self.terms();
            if terms.values().all(|c| c % d == 0) {
                return Some(Dim::from_terms(terms.into_iter().map(|(m, c)| (m, c / d)).collect()));
            }
        } else if divisor == self {
            return Some(Dim::Const(1));
        } else if let Some(q) = self.exact_div_by_mono(divisor) {
            return Some(q);
        }
        Some(Dim::atom(Atom::FloorDiv(Box::new(self.clone()), Box::new(divisor.clone()))))
    }

    pub fn modulo(&self, divisor: &Dim) -> Option<Dim> {
        if let (Some(v), Some(d)) = (self.as_const(), divisor.as_const()) {
            return (d != 0).then(|| Dim::Const(crate::arith::floor_rem_i64(v, d)));
        }
        if divisor.as_const() == Some(0) {
            return None;
        }
        // Only exact divisibility folds to 0 (`(4*X) % 4`); `n*(X//n) → X` would assume
        // the very fact being asked.
        let exact = match divisor.as_const() {
            Some(d) => self.terms().values().all(|c| c % d == 0),
            None => self.exact_div_by_mono(divisor).is_some(),
        };
        if exact {
            return Some(Dim::Const(0));
        }
        Some(Dim::atom(Atom::Mod(Box::new(self.clone()), Box::new(divisor.clone()))))
    }

    /// `self / divisor` when `divisor` is a single monomial dividing every term.
    fn exact_div_by_mono(&self, divisor: &Dim) -> Option<Dim> {
        let dterms = divisor.terms();
        if dterms.len() != 1 {
            return None;
        }
        let (dmono, dcoef) = dterms.into_iter().next()?;
        let mut out = Terms::new();
        for (mono, coef) in self.terms() {
            if coef % dcoef != 0 {
                return None;
            }
            let rest = divide_mono(&mono, &dmono)?;
            *out.entry(rest).or_insert(0) += coef / dcoef;
        }
        Some(Dim::from_terms(out))
    }

    /// Replaces symbols by dims (schedule keys by their values, callee symbols by the
    /// caller's dims) and renormalizes.
    pub fn substitute(&self, lookup: &dyn Fn(&str) -> Option<Dim>) -> Dim {
        match self {
            Dim::Const(_) => return self.clone(),
            Dim::Sym(s) => return lookup(s).unwrap_or_else(|| self.clone()),
            Dim::Poly(_) => {}
        }
        let mut out = Dim::Const(0);
        for (mono, coef) in self.terms() {
            let mut term = Dim::Const(coef);
            for (atom, power) in &mono {
                let value = match atom {
                    Atom::Sym(s) => lookup(s).unwrap_or_else(|| Dim::Sym(s.clone())),
                    Atom::FloorDiv(a, b) => {
                        let (a, b) = (a.substitute(lookup), b.substitute(lookup));
                        a.floor_div(&b).unwrap_or_else(|| Dim::atom(Atom::FloorDiv(Box::new(a), Box::new(b))))
                    }
                    Atom::Mod(a, b) => {
                        let (a, b) = (a.substitute(lookup), b.substitute(lookup));
                        a.modulo(&b).unwrap_or_else(|| Dim::atom(Atom::Mod(Box::new(a), Box::new(b))))
                    }
                };
                for _ in 0..*power {
                    term = term.mul_plain(&value);
                }
            }
            out = out.add(&term);
        }
        out
    }

    /// Evaluates the dim when every symbol is given a value.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        self.eval_numeric(lookup).or_else(|| self.substitute(&|s| lookup(s).map(Dim::Const)).as_const())
    }

    /// The constant that [`Dim::substitute`] with these values folds the dim to, computed
    /// on integers with the same saturating arithmetic in the same order, without building
    /// polynomials; `None` when a symbol has no value or a division is by zero (then only
    /// the symbolic substitution can tell). Specialization asks it for every dim of every
    /// autotune candidate.
    pub fn eval_numeric(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        match self {
            Dim::Const(c) => Some(*c),
            Dim::Sym(s) => lookup(s),
            Dim::Poly(terms) => {
                let mut out = 0i64;
                for (mono, coef) in terms.iter() {
                    let mut term = *coef;
                    for (atom, power) in mono {
                        let value = match atom {
                            Atom::Sym(s) => lookup(s)?,
                            Atom::FloorDiv(a, b) => {
                                let (a, b) = (a.eval_numeric(lookup)?, b.eval_numeric(lookup)?);
                                (b != 0).then(|| crate::arith::floor_div_i64(a, b))?
                            }
                            Atom::Mod(a, b) => {
                                let (a, b) = (a.eval_numeric(lookup)?, b.eval_numeric(lookup)?);
                                (b != 0).then(|| crate::arith::floor_rem_i64(a, b))?
                            }
                        };
                        for _ in 0..*power {
                            term = term.saturating_mul(value);
                        }
                    }
                    out = out.saturating_add(term);
                }
                Some(out)
            }
        }
    }

    /// Parses a dim string: integers, names, `+ - * // %`, parentheses.
    pub fn parse(text: &str) -> Result<Dim, DimParseError> {
        let mut parser = DimParser { chars: text.char_indices().peekable(), text, obligations: Vec::new() };
        let dim = parser.sum()?;
        parser.skip_ws();
        if let Some(&(at, c)) = parser.chars.peek() {
            return Err(DimParseError { offset: at, message: format!("unexpected `{c}` in a dimension") });
        }
        Ok(dim)
    }
}

fn multiply_monos(a: &Mono, b: &Mono) -> Mono {
    let mut map: BTreeMap<Atom, u32> = BTreeMap::new();
    for (atom, power) in a.iter().chain(b.iter()) {
        *map.entry(atom.clone()).or_insert(0) += power;
    }
    map.into_iter().collect()
}

/// `rest` = `mono / divisor` when every atom of the divisor occurs with enough power.
fn divide_mono(mono: &Mono, divisor: &Mono) -> Option<Mono> {
    let mut map: BTreeMap<Atom, u32> = mono.iter().cloned().collect();
    for (atom, power) in divisor {
        let have = map.get_mut(atom)?;
        if *have < *power {
            return None;
        }
        *have -= power;
        if *have == 0 {
            map.remove(atom);
        }
    }
    Some(map.into_iter().collect())
}

/// Applies `n * (X // n) → X` inside one term. Each rewrite removes one `//` atom,
/// so the recursion through `mul` terminates.
fn simplify_term(mono: Mono, coef: i64, obligations: &mut Vec<Obligation>) -> Dim {
    for idx in 0..mono.len() {
        let Atom::FloorDiv(x, n) = &mono[idx].0 else {
            continue;
        };
        let mut rest = mono.clone();
        if rest[idx].1 == 1 {
            rest.remove(idx);
        } else {
            rest[idx].1 -= 1;
        }
        let rest_dim = Dim::from_terms(BTreeMap::from([(rest, coef)]));
        if let Some(q) = rest_dim.exact_div_by_mono(n) {
            obligations.push(Obligation { value: (**x).clone(), divisor: (**n).clone() });
            return q.mul(x, obligations);
        }
    }
    Dim::from_terms(BTreeMap::from([(mono, coef)]))
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Const(c) => return write!(f, "{c}"),
            Dim::Sym(s) => return f.write_str(s),
            Dim::Poly(_) => {}
        }
        let terms = self.terms();
        // Higher-degree terms first, constants last: "B*H + 1", "S - 1".
        let mut terms: Vec<(&Mono, &i64)> = terms.iter().collect();
        terms.sort_by_key(|(m, _)| (std::cmp::Reverse(m.len()), (*m).clone()));
        for (i, (mono, &coef)) in terms.iter().enumerate() {
            let (sign, abs) = if coef < 0 { ("-", coef.unsigned_abs()) } else { ("+", coef as u64) };
            if i == 0 {
                if sign == "-" {
                    f.write_str("-")?;
                }
            } else {
                write!(f, " {sign} ")?;
            }
            if mono.is_empty() {
                write!(f, "{abs}")?;
                continue;
            }
            if abs != 1 {
                write!(f, "{abs}*")?;
            }
            for (j, (atom, power)) in mono.iter().enumerate() {
                for k in 0..*power {
                    if j > 0 || k > 0 {
                        f.write_str("*")?;
                    }
                    match atom {
                        Atom::Sym(s) => f.write_str(s)?,
                        Atom::FloorDiv(a, b) => write!(f, "{}//{}", paren(a), paren(b))?,
                        Atom::Mod(a, b) => write!(f, "{}%{}", paren(a), paren(b))?,
                    }
                }
            }
        }
        Ok(())
    }
}

fn paren(d: &Dim) -> String {
    let s = d.to_string();
    if d.as_sym().is_some() || d.is_const() {
        s
    } else {
        format!("({s})")
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DimParseError {
    /// Byte offset inside the dim string.
    pub offset: usize,
    pub message: String,
}

struct DimParser<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    text: &'a str,
    obligations: Vec<Obligation>,
}

impl DimParser<'_> {
    fn skip_ws(&mut self) {
        while self.chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            self.chars.next();
        }
    }

    fn at(&mut self) -> usize {
        self.chars.peek().map_or(self.text.len(), |(i, _)| *i)
    }

    fn sum(&mut self) -> Result<Dim, DimParseError> {
        let mut acc = self.product()?;
        loop {
            self.skip_ws();
            match self.chars.peek().map(|(_, c)| *c) {
                Some('+') => {
                    self.chars.next();
                    acc = acc.add(&self.product()?);
                }
                Some('-') => {
                    self.chars.next();
                    acc = acc.sub(&self.product()?);
                }
                _ => return Ok(acc),
            }
        }
    }

    fn product(&mut self) -> Result<Dim, DimParseError> {
        let mut acc = self.factor()?;
        loop {
            self.skip_ws();
            let at = self.at();
            match self.chars.peek().map(|(_, c)| *c) {
                Some('*') => {
                    self.chars.next();
                    let rhs = self.factor()?;
                    acc = acc.mul(&rhs, &mut self.obligations);
                }
                Some('/') => {
                    self.chars.next();
                    if self.chars.peek().map(|(_, c)| *c) != Some('/') {
                        return Err(DimParseError {
                            offset: at,
                            message: "use `//` for division in a dimension".into(),
                        });
                    }
                    self.chars.next();
                    let rhs = self.factor()?;
                    acc =
                        acc.floor_div(&rhs).ok_or(DimParseError { offset: at, message: "division by zero".into() })?;
                }
                Some('%') => {
                    self.chars.next();
                    let rhs = self.factor()?;
                    acc = acc.modulo(&rhs).ok_or(DimParseError { offset: at, message: "modulo by zero".into() })?;
                }
                _ => return Ok(acc),
            }
        }
    }

    fn factor(&mut self) -> Result<Dim, DimParseError> {
        self.skip_ws();
        let at = self.at();
        match self.chars.peek().map(|(_, c)| *c) {
            Some('(') => {
                self.chars.next();
                let inner = self.sum()?;
                self.skip_ws();
                if self.chars.next().map(|(_, c)| c) != Some(')') {
                    return Err(DimParseError { offset: self.at(), message: "expected `)`".into() });
                }
                Ok(inner)
            }
            Some('-') => {
                self.chars.next();
                Ok(self.factor()?.neg())
            }
            Some(c) if c.is_ascii_digit() => {
                let mut s = String::new();
                while let Some(&(_, c)) = self.chars.peek() {
                    if c.is_ascii_digit() || c == '_' {
                        s.push(c);
                        self.chars.next();
                    } else {
                        break;
                    }
                }
                s.retain(|c| c != '_');
                s.parse()
                    .map(Dim::constant)
                    .map_err(|_| DimParseError { offset: at, message: "number too large".into() })
            }
            Some(c) if c.is_alphabetic() || c == '_' => {
                let mut s = String::new();
                while let Some(&(_, c)) = self.chars.peek() {
                    if c.is_alphanumeric() || c == '_' {
                        s.push(c);
                        self.chars.next();
                    } else {
                        break;
                    }
                }
                Ok(Dim::sym(&s))
            }
            Some(c) => Err(DimParseError { offset: at, message: format!("unexpected `{c}` in a dimension") }),
            None => Err(DimParseError { offset: at, message: "expected a dimension".into() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dim {
        Dim::parse(s).unwrap()
    }

    proptest::proptest! {
        /// The integer fast path folds to what the symbolic substitution folds to.
        #[test]
        fn numeric_evaluation_agrees_with_substitution(
            ops in proptest::collection::vec((0usize..5, 0usize..4, -3i64..70), 1..7),
            values in proptest::collection::vec(-9i64..130, 3),
            missing in 0usize..4,
        ) {
            let names = ["BM", "BN", "S", "2"];
            let mut text = String::from("BM");
            for (op, name, constant) in ops {
                let operand = if constant % 3 == 0 { constant.to_string() } else { names[name].to_string() };
                let op = ["+", "-", "*", "//", "%"][op];
                text = format!("({text}) {op} {operand}");
            }
            let Ok(dim) = Dim::parse(&text) else { return Ok(()) };
            let lookup = |s: &str| match s {
                "BM" if missing != 0 => Some(values[0]),
                "BN" if missing != 1 => Some(values[1]),
                "S" if missing != 2 => Some(values[2]),
                _ => None,
            };
            let symbolic = dim.substitute(&|s| lookup(s).map(Dim::Const)).as_const();
            if let Some(v) = dim.eval_numeric(&lookup) {
                proptest::prop_assert_eq!(Some(v), symbolic, "{}", text);
            }
            proptest::prop_assert_eq!(dim.eval(&lookup), symbolic, "{}", text);
        }
    }

    #[test]
    fn normal_forms_compare() {
        assert_eq!(d("B*H"), d("H * B"));
        assert_ne!(d("BH"), d("B*H"));
        assert_eq!(d("3*D"), d("D + 2*D"));
        assert_eq!(d("S+1-1"), d("S"));
        assert_eq!(d("(m0 + BM) - m0"), d("BM"));
        assert_eq!(d("2*(X+1)"), d("2*X + 2"));
    }

    #[test]
    fn floor_div_rule_records_obligation() {
        let x = d("D");
        let n = d("h");
        let q = x.floor_div(&n).unwrap();
        let mut obligations = Vec::new();
        let back = n.mul(&q, &mut obligations);
        assert_eq!(back, x);
        assert_eq!(obligations, vec![Obligation { value: x, divisor: n }]);
        assert_eq!(d("3*(D//3)"), d("D"));
        assert_eq!(d("6*(D//3)"), d("2*D"));
        assert_eq!(d("(3*D)//3"), d("D"));
        assert_eq!(d("D//2").to_string(), "D//2");
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(d("B*H").to_string(), "B*H");
        assert_eq!(d("S - 1").to_string(), "S - 1");
        assert_eq!(d("3*D").to_string(), "3*D");
        assert_eq!(d("128").to_string(), "128");
        assert_eq!(d("(S+1)//2").to_string(), "(S + 1)//2");
    }

    #[test]
    fn substitution_and_evaluation() {
        let dim = d("BM*2 + K//4");
        let v = dim.eval(&|s| match s {
            "BM" => Some(64),
            "K" => Some(100),
            _ => None,
        });
        assert_eq!(v, Some(153));
        assert_eq!(d("M % 16").eval(&|_| Some(40)), Some(8));
        assert_eq!(d("(4*X) % 4"), Dim::constant(0));
        assert_eq!(d("(H*X) % H"), Dim::constant(0));
    }

    #[test]
    fn parse_errors_point_inside() {
        let err = Dim::parse("M +").unwrap_err();
        assert_eq!(err.offset, 3);
        assert!(Dim::parse("M/2").is_err());
    }
}
