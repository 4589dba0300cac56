//! Schedules (LANGUAGE.md §7): fixed values, autotune spaces and their validation.

use std::collections::BTreeMap;
use std::fmt;

use crate::text::TextRange;

/// The standard schedule keys the compiler itself consumes.
pub const STANDARD_KEYS: &[&str] = &[
    "BM",
    "BN",
    "BK",
    "BD",
    "warps",
    "stages",
    "vector",
    "swizzle",
    "mma",
    "copy",
    "producer",
    "cluster_x",
    "cluster_y",
];

/// The methods of a `Schedule` value (each returns a new `Schedule`).
pub const SCHEDULE_METHODS: &[&str] = &[
    "with_block",
    "with_k",
    "with_warps",
    "with_stages",
    "with_vector",
    "with_swizzle",
    "with_mma",
    "with_copy",
    "with_producer",
    "with_cluster",
    "block",
    "k",
    "d",
    "warps",
    "stages",
    "vector",
    "swizzle",
    "mma",
    "copy",
    "producer",
    "cluster",
];

/// `ctx.m` ≡ `ctx.BM` and friends; Triton spellings of autotune keys map too.
pub fn canonical_key(key: &str) -> &str {
    match key {
        "m" => "BM",
        "n" => "BN",
        "k" => "BK",
        "d" => "BD",
        "num_warps" => "warps",
        "num_stages" => "stages",
        other => other,
    }
}

/// The keywords of `Schedule(...)` after `block=`, and the keys they set: also the
/// methods of the search-space chain (`.k([...])`, `.warps([...])`, ...).
pub const KEYWORD_KEYS: &[(&str, &str)] = &[
    ("k", "BK"),
    ("d", "BD"),
    ("warps", "warps"),
    ("stages", "stages"),
    ("vector", "vector"),
    ("swizzle", "swizzle"),
    ("mma", "mma"),
    ("copy", "copy"),
    ("producer", "producer"),
    ("cluster_x", "cluster_x"),
    ("cluster_y", "cluster_y"),
];

/// Keys whose value the compiler uses even when the kernel never reads them (no W0705).
pub fn consumed_by_compiler(key: &str) -> bool {
    matches!(
        canonical_key(key),
        "warps" | "stages" | "vector" | "swizzle" | "mma" | "copy" | "producer" | "cluster_x" | "cluster_y"
    )
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum KeyValue {
    Int(i64),
    Str(String),
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::Int(v) => write!(f, "{v}"),
            KeyValue::Str(s) => write!(f, "\"{s}\""),
        }
    }
}

impl KeyValue {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            KeyValue::Int(v) => Some(*v),
            KeyValue::Str(_) => None,
        }
    }
}

/// A concrete schedule: canonical key → value.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ScheduleValue {
    pub values: BTreeMap<String, KeyValue>,
}

impl ScheduleValue {
    /// The schedule a plain `@kernel` gets: 128×128 blocks, k=32, 4 warps, 2 stages.
    pub fn default_for_kernel() -> ScheduleValue {
        let mut s = ScheduleValue::default();
        for (k, v) in [("BM", 128), ("BN", 128), ("BK", 32), ("BD", 64), ("warps", 4), ("stages", 2), ("vector", 4)] {
            s.values.insert(k.to_string(), KeyValue::Int(v));
        }
        s.values.insert("swizzle".into(), KeyValue::Str("none".into()));
        s
    }

    /// The value a plain `@kernel` has for a standard key: [`Self::default_for_kernel`]'s,
    /// and `"mma.sync"` for `mma` (left out of the default schedule, so configurations that
    /// do not set it read as before), and `"cp.async"` for `copy` (the same).
    pub fn kernel_default(key: &str) -> Option<KeyValue> {
        match canonical_key(key) {
            "mma" => Some(KeyValue::Str(MMA_SYNC.into())),
            "copy" => Some(KeyValue::Str(CP_ASYNC.into())),
            "producer" => Some(KeyValue::Str(NO_PRODUCER.into())),
            "cluster_x" | "cluster_y" => Some(KeyValue::Int(1)),
            k => Self::default_for_kernel().get(k).cloned(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&KeyValue> {
        self.values.get(canonical_key(key))
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(KeyValue::as_int)
    }

    pub fn set(&mut self, key: &str, value: KeyValue) {
        self.values.insert(canonical_key(key).to_string(), value);
    }

    /// `base` overridden by `self`.
    pub fn layered_on(&self, base: &ScheduleValue) -> ScheduleValue {
        let mut out = base.clone();
        for (k, v) in &self.values {
            out.values.insert(k.clone(), v.clone());
        }
        out
    }

    pub fn warps(&self) -> i64 {
        self.int("warps").unwrap_or(4)
    }

    pub fn stages(&self) -> i64 {
        self.int("stages").unwrap_or(2)
    }

    /// The tensor-core instruction family `tile.dot` asks for: `mma` (absent: `mma.sync`).
    pub fn mma(&self) -> MmaFamily {
        match self.get("mma") {
            Some(KeyValue::Str(s)) if s == WGMMA => MmaFamily::Wgmma,
            _ => MmaFamily::MmaSync,
        }
    }

    /// How staged global → shared copies are made: `copy` (absent: `cp.async`).
    pub fn copy(&self) -> CopyEngine {
        match self.get("copy") {
            Some(KeyValue::Str(s)) if s == TMA => CopyEngine::Tma,
            _ => CopyEngine::CpAsync,
        }
    }

    /// Whether a producer warpgroup issues the staged copies (`producer` is
    /// `"warpgroup"` or `"pingpong"`; absent: no).
    pub fn producer_warpgroup(&self) -> bool {
        matches!(self.get("producer"), Some(KeyValue::Str(s)) if s == PRODUCER_WARPGROUP || s == PRODUCER_PINGPONG)
    }

    /// Whether the two consumer warpgroups of a producer take turns at their first dot
    /// (`producer = "pingpong"`, FlashAttention-3's ping-pong schedule).
    pub fn pingpong(&self) -> bool {
        matches!(self.get("producer"), Some(KeyValue::Str(s)) if s == PRODUCER_PINGPONG)
    }

    /// The thread-block cluster's shape over the grid's first two axes (`cluster_x`,
    /// `cluster_y`: CUDA's `clusterDim`), `[1, 1]` without one.
    pub fn cluster(&self) -> [i64; 2] {
        [self.int("cluster_x").unwrap_or(1), self.int("cluster_y").unwrap_or(1)]
    }

    /// CTAs per cluster (1: no cluster).
    pub fn cluster_size(&self) -> i64 {
        self.cluster().iter().product()
    }
}

/// The value of the `producer` key that adds a producer warpgroup: it issues the TMA
/// copies while the `warps` run the dots (warp specialization, sm_90a).
pub const PRODUCER_WARPGROUP: &str = "warpgroup";
/// The value of the `producer` key that adds a producer warpgroup and has the two
/// consumer warpgroups take turns at the tensor cores: one runs its first dot while the
/// other runs the rest of its iteration (FlashAttention-3's ping-pong softmax).
pub const PRODUCER_PINGPONG: &str = "pingpong";
/// The value of the `producer` key with no producer: every warp runs the whole loop (the
/// default).
pub const NO_PRODUCER: &str = "none";

/// The value of the `copy` key that asks for Hopper's Tensor Memory Accelerator.
pub const TMA: &str = "tma";
/// The value of the `copy` key that asks for per-thread `cp.async` copies (the default).
pub const CP_ASYNC: &str = "cp.async";

/// The schedule key `copy`: what fills the shared buffers a GPU kernel stages.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum CopyEngine {
    /// Every thread issues 16-byte `cp.async` chunks (sm_80 and sm_90).
    CpAsync,
    /// One thread issues `cp.async.bulk.tensor` boxes through a tensor map, completed on
    /// an `mbarrier` (sm_90a; the buffers `wgmma` reads).
    Tma,
}

/// The value of the `mma` key that asks for Hopper's warpgroup MMA.
pub const WGMMA: &str = "wgmma";
/// The value of the `mma` key that asks for warp-level `mma.sync` (the default).
pub const MMA_SYNC: &str = "mma.sync";

/// The schedule key `mma`: which tensor-core instructions a GPU target's `tile.dot` uses.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum MmaFamily {
    /// Warp-level `mma.sync` with `ldmatrix` operands (sm_80 and sm_90).
    MmaSync,
    /// Warpgroup `wgmma.mma_async` with both operands in shared memory (sm_90a).
    Wgmma,
}

impl fmt::Display for ScheduleValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "Schedule({})", parts.join(", "))
    }
}

/// The values a string-valued standard key takes (`swizzle`, `mma`, `copy`), in the
/// order E0701 lists them; `None` for an integer key.
pub fn choices(key: &str) -> Option<&'static [&'static str]> {
    match canonical_key(key) {
        "swizzle" => Some(&["xor", "none"]),
        "mma" => Some(&[MMA_SYNC, WGMMA]),
        "copy" => Some(&[CP_ASYNC, TMA]),
        "producer" => Some(&[NO_PRODUCER, PRODUCER_WARPGROUP, PRODUCER_PINGPONG]),
        _ => None,
    }
}

/// Why a schedule value is invalid (E0701), or `None` when it is fine.
pub fn validate(key: &str, value: &KeyValue) -> Option<String> {
    let key = canonical_key(key);
    if let Some(allowed) = choices(key) {
        let listed = allowed.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(" or ");
        return match value {
            KeyValue::Str(s) if allowed.contains(&s.as_str()) => None,
            KeyValue::Str(s) => Some(format!("{key} must be {listed}, got \"{s}\"")),
            KeyValue::Int(_) => Some(format!("{key} must be {listed}")),
        };
    }
    match (key, value) {
        ("BM" | "BN" | "BK" | "BD", KeyValue::Int(v)) => {
            if *v <= 0 {
                Some(format!("{key} must be positive, got {v}"))
            } else if !(is_power_of_two(*v) || v % 16 == 0) {
                Some(format!("{key} = {v} is neither a power of two nor a multiple of 16"))
            } else {
                None
            }
        }
        ("warps", KeyValue::Int(v)) => {
            (![1, 2, 4, 8, 16].contains(v)).then(|| format!("warps must be one of 1, 2, 4, 8, 16, got {v}"))
        }
        ("stages", KeyValue::Int(v)) => (!(1..=8).contains(v)).then(|| format!("stages must be in 1..8, got {v}")),
        // The portable cluster sizes: at most 8 CTAs (the product is the rule's).
        ("cluster_x" | "cluster_y", KeyValue::Int(v)) => {
            (![1, 2, 4, 8].contains(v)).then(|| format!("{key} must be one of 1, 2, 4, 8, got {v}"))
        }
        ("vector", KeyValue::Int(v)) => {
            (![1, 2, 4, 8, 16].contains(v)).then(|| format!("vector must be one of 1, 2, 4, 8, 16, got {v}"))
        }
        ("BM" | "BN" | "BK" | "BD" | "warps" | "stages" | "vector" | "cluster_x" | "cluster_y", KeyValue::Str(_)) => {
            Some(format!("{key} must be an integer"))
        }
        // A custom autotune key (BLOCK, BLOCK_M, ...): any positive int.
        (_, KeyValue::Int(v)) if *v <= 0 => Some(format!("{key} must be positive, got {v}")),
        _ => None,
    }
}

fn is_power_of_two(v: i64) -> bool {
    v > 0 && (v & (v - 1)) == 0
}

/// One key of an autotune space with its candidates (ranges relative to the function).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SpaceKey {
    /// As written (`num_warps`, `BLOCK`); `canonical_key` maps it.
    pub key: String,
    pub key_range: TextRange,
    pub candidates: Vec<(KeyValue, TextRange)>,
}

/// A rule of a derived search space: a configuration where `key` has `value` is a
/// candidate only if every key of `needs` has its value. `@kernel.auto` on sm_90 uses
/// these so that its space holds only the Hopper combinations that exist
/// (`copy="tma"` needs `mma="wgmma"`): written spaces have none, and prune such
/// candidates with a reason instead (W0702).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SpaceRule {
    pub key: String,
    pub value: KeyValue,
    pub needs: Vec<(String, KeyValue)>,
}

impl SpaceRule {
    /// Whether `s` breaks the rule.
    fn excludes(&self, s: &ScheduleValue) -> bool {
        s.get(&self.key) == Some(&self.value) && self.needs.iter().any(|(k, v)| s.get(k) != Some(v))
    }
}

impl fmt::Display for SpaceRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let needs: Vec<String> = self.needs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{}={} only with {}", self.key, self.value, needs.join(", "))
    }
}

/// How a kernel is scheduled.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct KernelSchedule {
    /// `@kernel.schedule(S)` (or the default for a plain `@kernel`).
    pub fixed: ScheduleValue,
    /// `@kernel.autotune(space=...)`: the keys to search.
    pub space: Vec<SpaceKey>,
    /// The `space=` argument (primary span of W0702/E0703).
    pub space_range: Option<TextRange>,
    pub metric: Option<String>,
    pub budget_ms: Option<i64>,
    pub cache: Option<String>,
    /// `@kernel.auto`: the target's default search space.
    pub auto: bool,
    /// Combinations of the space that are not candidates (only derived spaces have any).
    pub rules: Vec<SpaceRule>,
    /// Single configurations that are not candidates: those of a derived space that a
    /// rule of the kernel refuses (`passes::auto_space`).
    pub excluded: Vec<ScheduleValue>,
}

impl KernelSchedule {
    /// The keys of the search space in their canonical names (`m` is `BM`), each once,
    /// in the order they are written.
    pub fn canonical_space_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for k in &self.space {
            let key = canonical_key(&k.key);
            if !keys.iter().any(|seen| seen == key) {
                keys.push(key.to_string());
            }
        }
        keys
    }

    pub fn is_autotuned(&self) -> bool {
        !self.space.is_empty() || self.auto
    }

    /// Every configuration of the space (cartesian product) over the fixed values, less
    /// those a [`SpaceRule`] excludes and the `excluded` ones.
    pub fn configurations(&self) -> Vec<ScheduleValue> {
        let base = self.fixed.layered_on(&ScheduleValue::default_for_kernel());
        // The cartesian product, the first key varying slowest: configuration i takes
        // digit (i / stride) % count of each key, and is built once from the base (not
        // through a partial configuration per key and level).
        let keys: Vec<_> = self.space.iter().filter(|k| !k.candidates.is_empty()).collect();
        let total: usize = keys.iter().map(|k| k.candidates.len()).product();
        let mut strides = vec![1usize; keys.len()];
        for j in (0..keys.len().saturating_sub(1)).rev() {
            strides[j] = strides[j + 1] * keys[j + 1].candidates.len();
        }
        (0..total)
            .map(|i| {
                let mut s = base.clone();
                // In the space's order, so that a key given twice takes its later value.
                for (key, stride) in keys.iter().zip(&strides) {
                    let (value, _) = &key.candidates[(i / stride) % key.candidates.len()];
                    s.set(&key.key, value.clone());
                }
                s
            })
            .filter(|s| !self.rules.iter().any(|r| r.excludes(s)) && !self.excluded.contains(s))
            .collect()
    }

    /// The configuration used when one is needed without a search: the first of the
    /// space (or the fixed schedule).
    pub fn first_configuration(&self) -> ScheduleValue {
        let mut s = self.fixed.layered_on(&ScheduleValue::default_for_kernel());
        for key in &self.space {
            if let Some((v, _)) = key.candidates.first() {
                s.set(&key.key, v.clone());
            }
        }
        s
    }

    /// The key names without their values (what a function body may depend on).
    pub fn keys(&self) -> ScheduleKeys {
        ScheduleKeys {
            space: self.space.iter().map(|k| k.key.clone()).collect(),
            fixed: self.fixed.values.keys().cloned().collect(),
            autotuned: self.is_autotuned(),
        }
    }

    /// Keys readable through `ctx.`: standard ones, the space's, and the fixed ones.
    pub fn has_key(&self, key: &str) -> bool {
        self.keys().has_key(key)
    }

    pub fn key_names(&self) -> Vec<String> {
        self.keys().key_names()
    }
}

/// The names a kernel's schedule defines, without values: a body that reads `ctx.BM`
/// depends on BM existing, not on its candidates.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct ScheduleKeys {
    /// Autotune keys as written.
    pub space: Vec<String>,
    /// Keys with a fixed value (canonical names).
    pub fixed: Vec<String>,
    pub autotuned: bool,
}

impl ScheduleKeys {
    pub fn has_key(&self, key: &str) -> bool {
        let key = canonical_key(key);
        STANDARD_KEYS.contains(&key)
            || self.space.iter().any(|k| canonical_key(k) == key)
            || self.fixed.iter().any(|k| k == key)
    }

    pub fn key_names(&self) -> Vec<String> {
        let mut keys: Vec<String> = STANDARD_KEYS.iter().map(|s| s.to_string()).collect();
        for k in self.space.iter().chain(&self.fixed) {
            let c = canonical_key(k).to_string();
            if !keys.contains(&c) {
                keys.push(c);
            }
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rules() {
        assert!(validate("BM", &KeyValue::Int(100)).is_some());
        assert!(validate("BM", &KeyValue::Int(96)).is_none());
        assert!(validate("BN", &KeyValue::Int(64)).is_none());
        assert!(validate("warps", &KeyValue::Int(3)).is_some());
        assert!(validate("num_warps", &KeyValue::Int(8)).is_none());
        assert!(validate("stages", &KeyValue::Int(9)).is_some());
        assert!(validate("swizzle", &KeyValue::Str("zigzag".into())).is_some());
        assert!(validate("mma", &KeyValue::Str("wgmma".into())).is_none());
        assert!(validate("mma", &KeyValue::Str("mma.sync".into())).is_none());
        assert!(validate("mma", &KeyValue::Str("hgmma".into())).is_some());
        assert!(validate("mma", &KeyValue::Int(1)).is_some());
        assert!(validate("copy", &KeyValue::Str("tma".into())).is_none());
        assert!(validate("copy", &KeyValue::Str("cp.async".into())).is_none());
        assert!(validate("copy", &KeyValue::Str("bulk".into())).is_some());
        assert!(validate("copy", &KeyValue::Int(1)).is_some());
        assert!(validate("producer", &KeyValue::Str("warpgroup".into())).is_none());
        assert!(validate("producer", &KeyValue::Str("none".into())).is_none());
        assert!(validate("producer", &KeyValue::Str("pingpong".into())).is_none());
        assert!(validate("producer", &KeyValue::Str("warp".into()))
            .unwrap()
            .contains("\"none\" or \"warpgroup\" or \"pingpong\""));
    }

    #[test]
    fn configurations_are_the_cartesian_product() {
        let space = vec![
            SpaceKey {
                key: "BM".into(),
                key_range: TextRange::default(),
                candidates: vec![(KeyValue::Int(64), TextRange::default()), (KeyValue::Int(128), TextRange::default())],
            },
            SpaceKey {
                key: "num_warps".into(),
                key_range: TextRange::default(),
                candidates: vec![(KeyValue::Int(4), TextRange::default()), (KeyValue::Int(8), TextRange::default())],
            },
        ];
        let schedule = KernelSchedule { space, ..Default::default() };
        let configs = schedule.configurations();
        assert_eq!(configs.len(), 4);
        // The first key varies slowest.
        let order: Vec<(Option<i64>, i64)> = configs.iter().map(|c| (c.int("BM"), c.warps())).collect();
        assert_eq!(order, [(Some(64), 4), (Some(64), 8), (Some(128), 4), (Some(128), 8)]);
        assert!(schedule.has_key("m"));
        assert!(!schedule.has_key("BLOCK"));
    }

    #[test]
    fn a_space_rule_drops_the_combinations_it_excludes() {
        let key = |k: &str, vs: &[&str]| SpaceKey {
            key: k.into(),
            key_range: TextRange::default(),
            candidates: vs.iter().map(|v| (KeyValue::Str(v.to_string()), TextRange::default())).collect(),
        };
        let rule = SpaceRule {
            key: "copy".into(),
            value: KeyValue::Str("tma".into()),
            needs: vec![("mma".into(), KeyValue::Str("wgmma".into()))],
        };
        let schedule = KernelSchedule {
            space: vec![key("mma", &["mma.sync", "wgmma"]), key("copy", &["cp.async", "tma"])],
            rules: vec![rule.clone()],
            ..Default::default()
        };
        let configs: Vec<String> = schedule.configurations().iter().map(|c| c.to_string()).collect();
        assert_eq!(configs.len(), 3, "{configs:?}");
        assert!(!configs.iter().any(|c| c.contains("copy=\"tma\"") && c.contains("mma=\"mma.sync\"")), "{configs:?}");
        assert_eq!(rule.to_string(), "copy=\"tma\" only with mma=\"wgmma\"");
    }
}
