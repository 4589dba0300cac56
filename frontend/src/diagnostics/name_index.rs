//! "Did you mean" among many names, in time that does not grow with their number.
//!
//! [`super::suggest`] compares a name with every candidate, which is right for the
//! short fixed lists it is given (decorators, dtypes, keywords). An undefined name is
//! compared with every local, parameter and module name instead, and a file with n
//! undefined names among n definitions made that n² edit distances (20 000 undefined
//! module constants: minutes). [`NameIndex`] answers the same question from an index:
//!
//! - Names of up to [`SHORT`] characters are indexed by their *deletion variants* (every
//!   string left after deleting at most three characters). Two names within edit
//!   distance d share a variant reached by i deletions from one and j from the other
//!   with i + j ≤ 2d, so the candidates are looked up stage by stage (s = i + j) and the
//!   search stops once a match at distance b is known and s > 2b: nearby names are found
//!   first and far ones are never compared.
//! - Longer names (rare) are kept by length and only those within the edit limit of the
//!   query's length are compared.
//!
//! Every query compares at most [`MAX_COMPARED`] candidates in full per index, so its
//! cost is bounded even in a file of thousands of nearly identical names; below that
//! bound the answer is exactly the one [`super::suggest`] gives (same distance limit,
//! same preferences), with ties broken by the order the names were inserted.

use std::collections::BTreeMap;
use std::hash::Hasher;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use super::{is_subsequence, same_first_char, suggestion_limit};

/// Names of up to this many characters are indexed by deletion variants (at most
/// 1 + 12 + 66 + 220 = 299 of them each).
const SHORT: usize = 12;
/// The largest edit distance a suggestion may be away (`suggestion_limit` of a long name).
const MAX_EDITS: usize = 3;
/// The most candidates one query compares in full in one index.
pub const MAX_COMPARED: usize = 64;

/// A set of names that can be asked for the one closest to a misspelling.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct NameIndex {
    names: Vec<Box<str>>,
    lower: Vec<Box<[char]>>,
    /// (variant hash, deletions << 30 | id) for every short name, sorted (see `freeze`),
    /// so that the names reached by a variant with a given number of deletions are one
    /// contiguous run.
    frozen: Vec<(u64, u32)>,
    /// `frozen` cut by the top `directory_bits` bits of the hash: entry p is where the
    /// hashes starting with p begin, so a lookup searches a handful of entries.
    directory: Vec<u32>,
    directory_bits: u32,
    /// The ids of names inserted since the last `freeze`, by (variant hash, deletions).
    pending: FxHashMap<(u64, u32), Vec<u32>>,
    /// Ids of the names longer than `SHORT`, by length in characters.
    long: BTreeMap<usize, Vec<u32>>,
    /// How many short names there are of each length (a query skips an index with none
    /// of a length within its limit).
    short_lengths: [u32; SHORT + 1],
}

impl NameIndex {
    pub fn from_names<'n>(names: impl IntoIterator<Item = &'n str>) -> NameIndex {
        let mut index = NameIndex::default();
        for name in names {
            index.insert(name);
        }
        index.freeze();
        index
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Adds a name; its id is the number of names inserted before it.
    pub fn insert(&mut self, name: &str) {
        let id = self.names.len() as u32;
        let lower: Box<[char]> = name.chars().map(|c| c.to_ascii_lowercase()).collect();
        if lower.len() <= SHORT {
            self.short_lengths[lower.len()] += 1;
            for (hash, deletions) in deletion_variants(&lower, MAX_EDITS, SHORT) {
                self.pending.entry((hash, deletions as u32)).or_default().push(id);
            }
        } else {
            self.long.entry(lower.len()).or_default().push(id);
        }
        self.names.push(name.into());
        self.lower.push(lower);
    }

    /// Moves the pending entries into the compact sorted table (for an index that is
    /// built once and kept, like a module's).
    pub fn freeze(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.frozen
            .extend(pending.into_iter().flat_map(|((h, j), ids)| ids.into_iter().map(move |id| (h, j << 30 | id))));
        self.frozen.sort_unstable();
        self.frozen.shrink_to_fit();
        self.directory_bits = (self.frozen.len().max(1).ilog2()).saturating_sub(2);
        let bits = self.directory_bits;
        self.directory =
            (0..=1u64 << bits).map(|p| self.frozen.partition_point(|&(h, _)| top_bits(h, bits) < p) as u32).collect();
    }

    /// The ids of the names that give the variant `hash` after `deletions` deletions.
    fn each_id(&self, hash: u64, deletions: usize, mut f: impl FnMut(u32)) {
        let tag = (deletions as u32) << 30;
        let p = top_bits(hash, self.directory_bits) as usize;
        let bucket = match self.directory.get(p..=p + 1) {
            Some(&[from, to]) => &self.frozen[from as usize..to as usize],
            _ => &[],
        };
        let start = bucket.partition_point(|&e| e < (hash, tag));
        for &(h, v) in &bucket[start..] {
            if h != hash || v >> 30 != deletions as u32 {
                break;
            }
            f(v & ((1 << 30) - 1));
        }
        for &id in self.pending.get(&(hash, deletions as u32)).into_iter().flatten() {
            f(id);
        }
    }

    /// Offers this index's closest names for `query` to `best`; `rank` orders ties
    /// between indexes (lower wins), after which the earlier inserted name wins.
    pub fn offer<'a>(&'a self, query: &Query, rank: u8, best: &mut Best<'a>) {
        let k = query.limit;
        let mut compared = 0usize;
        let mut seen = FxHashSet::default();
        let n = query.lower.len();
        let near = n.saturating_sub(k)..=(n + k).min(SHORT);
        if self.short_lengths.get(near).is_some_and(|counts| counts.iter().any(|&c| c > 0)) {
            let variants = query.variants.get_or_init(|| deletion_variants(&query.lower, k, SHORT));
            let mut hits = Vec::new();
            // Stage s: names that share a variant with the query after i + j = s
            // deletions. A name at distance d is reached by stage 2d at the latest, so
            // once one at distance b is known the stages after 2b cannot improve on it.
            for stage in 0..=2 * k {
                if best.distance().is_some_and(|b| stage > 2 * b) || compared == MAX_COMPARED {
                    break;
                }
                for &(hash, i) in variants.iter().filter(|&&(_, i)| i <= stage && stage - i <= k) {
                    self.each_id(hash, stage - i, |id| hits.push(id));
                }
                for id in hits.drain(..) {
                    if compared < MAX_COMPARED && seen.insert(id) {
                        compared += 1;
                        best.consider(query, &self.names[id as usize], &self.lower[id as usize], rank, id);
                    }
                }
            }
        }
        // Longer names: only those whose length is within the limit, nearest lengths first.
        let mut lengths: Vec<usize> = (n.saturating_sub(k).max(SHORT + 1)..=n + k).collect();
        lengths.sort_by_key(|&l| l.abs_diff(n));
        for len in lengths {
            for &id in self.long.get(&len).into_iter().flatten() {
                if compared == MAX_COMPARED {
                    return;
                }
                compared += 1;
                best.consider(query, &self.names[id as usize], &self.lower[id as usize], rank, id);
            }
        }
    }
}

/// A misspelled name, prepared once for the indexes it is looked up in.
pub struct Query<'q> {
    name: &'q str,
    lower: Vec<char>,
    limit: usize,
    /// Its deletion variants (computed once, for the first index that needs them).
    variants: std::cell::OnceCell<Vec<(u64, usize)>>,
}

impl<'q> Query<'q> {
    pub fn new(name: &'q str) -> Query<'q> {
        Query {
            name,
            lower: name.chars().map(|c| c.to_ascii_lowercase()).collect(),
            limit: suggestion_limit(name),
            variants: Default::default(),
        }
    }
}

/// The closest name found so far: (distance, not a supersequence, other first letter,
/// length, rank, id); smaller is better, as in [`super::suggest`].
#[derive(Default)]
pub struct Best<'a> {
    key: Option<(usize, bool, bool, usize, u8, u32)>,
    name: Option<&'a str>,
}

impl<'a> Best<'a> {
    pub fn name(&self) -> Option<&'a str> {
        self.name
    }

    fn distance(&self) -> Option<usize> {
        self.key.map(|k| k.0)
    }

    fn consider(&mut self, query: &Query, name: &'a str, lower: &[char], rank: u8, id: u32) {
        if name == query.name {
            return;
        }
        let Some(d) = bounded_distance(&query.lower, lower, query.limit) else {
            return;
        };
        let key = (d, !is_subsequence(query.name, name), !same_first_char(query.name, name), name.len(), rank, id);
        if self.key.is_none_or(|k| key < k) {
            self.key = Some(key);
            self.name = Some(name);
        }
    }
}

fn top_bits(hash: u64, bits: u32) -> u64 {
    if bits == 0 {
        0
    } else {
        hash >> (64 - bits)
    }
}

/// The Levenshtein distance of `a` and `b` if it is at most `limit`.
fn bounded_distance(a: &[char], b: &[char], limit: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    // Two rows on the stack for the usual short names, on the heap otherwise.
    const ROW: usize = 32;
    let (mut prev_stack, mut cur_stack) = ([0usize; ROW], [0usize; ROW]);
    let (mut prev_heap, mut cur_heap);
    let (mut prev, mut cur): (&mut [usize], &mut [usize]) = if b.len() < ROW {
        (&mut prev_stack[..=b.len()], &mut cur_stack[..=b.len()])
    } else {
        prev_heap = vec![0; b.len() + 1];
        cur_heap = vec![0; b.len() + 1];
        (&mut prev_heap, &mut cur_heap)
    };
    for (j, p) in prev.iter_mut().enumerate() {
        *p = j;
    }
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        let mut row_min = cur[0];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
            row_min = row_min.min(cur[j + 1]);
        }
        if row_min > limit {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    Some(prev[b.len()]).filter(|&d| d <= limit)
}

/// The distinct strings left after deleting at most `max` characters of `word`, as
/// (hash, fewest deletions), leaving out those longer than `max_len`.
fn deletion_variants(word: &[char], max: usize, max_len: usize) -> Vec<(u64, usize)> {
    fn combinations(n: usize, k: usize, from: usize, cur: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
        if cur.len() == k {
            f(cur);
            return;
        }
        for p in from..n {
            cur.push(p);
            combinations(n, k, p + 1, cur, f);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    for d in 0..=max.min(word.len()) {
        if word.len() - d > max_len {
            continue;
        }
        combinations(word.len(), d, 0, &mut Vec::with_capacity(d), &mut |deleted: &[usize]| {
            let mut h = FxHasher::default();
            let mut skip = deleted.iter().peekable();
            for (p, &c) in word.iter().enumerate() {
                if skip.peek() == Some(&&p) {
                    skip.next();
                } else {
                    h.write_u32(c as u32);
                }
            }
            h.write_usize(word.len() - d);
            out.push((h.finish(), d));
        });
    }
    out.sort_unstable();
    out.dedup_by_key(|(h, _)| *h);
    out
}

#[cfg(test)]
mod tests {
    use super::super::suggest;
    use super::*;

    /// A small deterministic generator (no dependency): names over a tiny alphabet, so
    /// that many are within the suggestion limit of each other.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }

        fn name(&mut self) -> String {
            let len = 1 + self.next(16) as usize;
            (0..len).map(|_| b"abAB_1x"[self.next(7) as usize] as char).collect()
        }
    }

    fn key(query: &str, found: Option<&str>) -> Option<(usize, bool, bool, usize)> {
        found.map(|c| {
            let d = super::super::edit_distance(&query.to_ascii_lowercase(), &c.to_ascii_lowercase());
            (d, !is_subsequence(query, c), !same_first_char(query, c), c.len())
        })
    }

    #[test]
    fn the_index_finds_what_a_full_scan_finds() {
        let mut rng = Lcg(7);
        for round in 0..40 {
            let names: Vec<String> = (0..(5 + round)).map(|_| rng.name()).collect();
            // Even rounds ask the frozen table, odd ones the pending map.
            let mut index = NameIndex::default();
            for n in &names {
                index.insert(n);
            }
            if round % 2 == 0 {
                index.freeze();
            }
            for _ in 0..60 {
                let q = rng.name();
                let mut best = Best::default();
                index.offer(&Query::new(&q), 0, &mut best);
                let scanned = suggest(&q, names.iter().map(String::as_str));
                assert_eq!(key(&q, best.name()), key(&q, scanned), "query {q:?} among {names:?}");
            }
        }
    }

    #[test]
    fn pending_and_frozen_entries_answer_alike() {
        let names = ["tile_load", "accumulator", "very_long_identifier_name", "x1", "ctx"];
        let frozen = NameIndex::from_names(names);
        let mut pending = NameIndex::default();
        for n in names {
            pending.insert(n);
        }
        for q in ["tile_lod", "acumulator", "very_long_identifer_name", "x2", "CTX", "ctz"] {
            let (mut a, mut b) = (Best::default(), Best::default());
            frozen.offer(&Query::new(q), 0, &mut a);
            pending.offer(&Query::new(q), 0, &mut b);
            assert_eq!(a.name(), b.name(), "{q}");
            assert_eq!(a.name(), suggest(q, names), "{q}");
        }
    }

    #[test]
    fn ties_go_to_the_lower_rank_then_the_earlier_name() {
        let locals = NameIndex::from_names(["loadb"]);
        let module = NameIndex::from_names(["loada", "loadc"]);
        let query = Query::new("loadx");
        let mut best = Best::default();
        module.offer(&query, 1, &mut best);
        assert_eq!(best.name(), Some("loada"));
        locals.offer(&query, 0, &mut best);
        assert_eq!(best.name(), Some("loadb"));
    }

    #[test]
    fn many_similar_names_cost_a_bounded_number_of_comparisons() {
        let names: Vec<String> = (0..20_000).map(|i| format!("c{i}")).collect();
        let index = NameIndex::from_names(names.iter().map(String::as_str));
        let mut best = Best::default();
        index.offer(&Query::new("u1234"), 0, &mut best);
        assert_eq!(best.name(), Some("c1234"));
    }
}
