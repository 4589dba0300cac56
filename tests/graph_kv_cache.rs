//! KV caches at the graph level (`KVCache[B, H, S_max, D_h, dtype]`): the seed's
//! `transformer_block` (seed 002, `tests/fixtures/state/seed_002_transformer_block.tsr`,
//! with only its real bugs fixed) appends to a cache and attends over it, causal with the
//! queries aligned to the cache's end. Each run goes through the real `tessera run --save`
//! on the interpreter and, where it is built, the CPU backend, and a NumPy oracle
//! recomputes the block in float64 from the saved inputs (the cache as given,
//! `cache.K.npy`, and the weights). The oracle also computes the block with the causal
//! mask aligned top-left and checks that it would refuse that: the test can fail.

mod graph_oracles;

use graph_oracles::*;

const SEED: &str = include_str!("fixtures/state/seed_002_transformer_block.tsr");

const BLOCK_ORACLE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
x, K0, V0 = load('x.npy'), load('cache.K.npy'), load('cache.V.npy')
Wqkv, Wo, Win, Wout = load('Wqkv.npy'), load('Wo.npy'), load('Wmlp_in.npy'), load('Wmlp_out.npy')
heads = 2
B, S, D = x.shape
Dh = D // heads
def rms(a):
    return a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + 1e-6)
def gelu(a):
    return 0.5 * a * (1 + np.tanh(0.7978845608 * (a + 0.044715 * a ** 3)))
def heads_of(t):  # [B, S, D] -> [B, heads, S, Dh], as split_qkv
    return t.reshape(B, S, heads, Dh).transpose(0, 2, 1, 3)
def attention(q, k, v, offset):
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(Dh)
    i = np.arange(q.shape[2])[:, None]
    j = np.arange(k.shape[2])[None, :]
    s = np.where(j <= i + offset, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v
def block(offset):
    h = rms(x)
    qkv = h @ Wqkv
    q, k, v = (heads_of(qkv[..., i * D:(i + 1) * D]) for i in range(3))
    K = np.concatenate([K0, k], axis=2)
    V = np.concatenate([V0, v], axis=2)
    a = attention(q, K, V, offset(S, K.shape[2]))
    a = a.transpose(0, 2, 1, 3).reshape(B, S, D)
    y = h + a @ Wo
    y = y + gelu(rms(y) @ Win) @ Wout
    return y, K, V, k, v
# bf16 storage after every kernel: a relative error of a few 2^-8 per step, through ~10 steps.
def err(got, want):
    return np.max(np.abs(got - want) / (0.05 + np.abs(want)))
y, K, V, k, v = block(lambda sq, sk: sk - sq)
gy, gK, gV = load('return0.out.npy'), load('cache.K.out.npy'), load('cache.V.out.npy')
L = K0.shape[2]
assert L == LEN, (L, LEN)
assert gK.shape == K.shape and gV.shape == V.shape and gy.shape == y.shape, (gK.shape, K.shape, gy.shape)
assert (gK[:, :, :L] == K0).all() and (gV[:, :, :L] == V0).all(), "the cache's positions are kept exactly"
assert err(gK[:, :, L:], k) < 0.15 and err(gV[:, :, L:], v) < 0.15, (err(gK[:, :, L:], k), err(gV[:, :, L:], v))
assert err(gy, y) < 0.3, err(gy, y)
if L > 0:
    # Not vacuous: the top-left causal mask gives a block this oracle refuses.
    assert err(gy, block(lambda sq, sk: 0)[0]) > 1.0
"#;

const DIMS: &str = "B=2,S=8,D=32,heads=2,F=64,S_max=24";

fn run_block(file: &std::path::Path, device: &str, len: Option<u32>, out: &std::path::Path) -> std::process::Output {
    let mut cmd = tessera();
    cmd.args(["run", file.to_str().unwrap(), "--kernel", "transformer_block", "--dims", DIMS])
        .args(["--arg", "heads=2", "--arg", "p=0.0", "--device", device, "--repeat", "1"])
        .args(["--save", out.to_str().unwrap()]);
    if let Some(n) = len {
        cmd.args(["--arg", &format!("cache.len={n}")]);
    }
    cmd.output().expect("tessera runs")
}

#[test]
fn the_seed_transformer_block_with_a_kv_cache_matches_numpy() {
    let has_numpy = numpy();
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "seed_002.tsr", SEED);
    let check = tessera().args(["check", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    for device in devices() {
        for len in [None, Some(5), Some(16)] {
            let out = dir.path().join(format!("{device}_{len:?}"));
            let o = run_block(&file, device, len, &out);
            assert_eq!(o.status.code(), Some(0), "{device}, cache.len {len:?}: {}", text(&o));
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
            assert_eq!(report["verdict"], "correct", "{report}");
            assert_eq!(report["dims"]["cache.len"], len.unwrap_or(0), "{report}");
            if has_numpy {
                let script = BLOCK_ORACLE.replace("LEN", &len.unwrap_or(0).to_string());
                let o = std::process::Command::new("python3").args(["-c", &script, out.to_str().unwrap()]).output();
                let o = o.unwrap();
                assert!(o.status.success(), "NumPy oracle on {device}, cache.len {len:?}: {}", text(&o));
            }
        }
    }
}

#[test]
fn the_seed_block_shows_the_cache_append_placement_and_attention_in_graph_ir() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "seed_002.tsr", SEED);
    let o = tessera()
        .args(["lower", file.to_str().unwrap(), "--kernel", "transformer_block", "--stage", "graph"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ir = String::from_utf8_lossy(&o.stdout).to_string();
    let line = |needle: &str| {
        ir.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in\n{ir}")).to_string()
    };
    assert!(ir.contains("%cache_K: tensor<Bxheadsxcache.lenx(D//heads)xbf16>"), "{ir}");
    assert!(ir.contains("returns = \"return0,cache.K,cache.V\""), "{ir}");
    let prefetch = line("graph.prefetch %cache_K, %cache_V");
    assert!(prefetch.contains("into = \"smem\", overlap = \"compute\", device = \"gpu\""), "{prefetch}");
    let append = line("graph.cache_append %cache_K, %cache_V, %k, %v");
    assert!(
        append.contains("cache = \"cache\", capacity = [S_max], policies = \"paged\", device = \"gpu\""),
        "{append}"
    );
    assert!(append.contains("-> tensor<Bxheadsx(S + cache.len)x(D//heads)xbf16>"), "{append}");
    let attention = line("graph.flash_attention %q, ");
    assert!(attention.contains("causal = true") && attention.contains("device = \"gpu\""), "{attention}");
    assert!(attention.contains("tensor<Bxheadsx(S + cache.len)x(D//heads)xbf16>"), "{attention}");
    assert!(line("func.return").contains("%y_2, "), "{ir}");
}

#[test]
fn appending_past_the_capacity_is_an_error_at_the_append() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "seed_002.tsr", SEED);
    for device in devices() {
        let o = run_block(&file, device, Some(20), &dir.path().join(format!("over_{device}")));
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let t = text(&o);
        assert!(t.contains("seed_002.tsr:23:17: KVCache `cache` overflows"), "{t}");
        assert!(t.contains("holds 20 positions and this append adds 8, 28 in all"), "{t}");
        assert!(t.contains("capacity S_max (S_max = 24)"), "{t}");
    }
    // Exactly full is fine.
    let o = run_block(&file, "interp", Some(16), &dir.path().join("full"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

const WINDOW: &str = r#"from tessera import *

@jit
def window(cache: KVCache["B", "H", "S_max", "Dh", bf16] @rolling_window,
           q: Tensor["B", "H", "S", "Dh", bf16], k: Tensor["B", "H", "S", "Dh", bf16],
           v: Tensor["B", "H", "S", "Dh", bf16]):
    c = cache.append(k, v).prune(6)
    return flash_attention(q, c.K, c.V, causal=True), c.K, c
"#;

#[test]
fn prune_keeps_the_last_positions_and_attention_aligns_fewer_queries_to_the_end() {
    let has_numpy = numpy();
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "window.tsr", WINDOW);
    for device in devices() {
        let out = dir.path().join(device);
        let o = tessera()
            .args(["run", file.to_str().unwrap(), "--kernel", "window", "--dims", "B=1,H=2,S=4,Dh=16,S_max=12"])
            .args(["--arg", "cache.len=7", "--device", device, "--repeat", "1", "--save", out.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{device}: {}", text(&o));
        if !has_numpy {
            continue;
        }
        let script = r#"
import sys, numpy as np
d = sys.argv[1]
load = lambda n: np.load(d + '/' + n).astype(np.float64)
K0, V0, q, k, v = (load(n + '.npy') for n in ('cache.K', 'cache.V', 'q', 'k', 'v'))
assert K0.shape[2] == 7
K = np.concatenate([K0, k], axis=2)[:, :, -6:]
V = np.concatenate([V0, v], axis=2)[:, :, -6:]
assert (load('cache.K.out.npy') == K).all() and (load('cache.V.out.npy') == V).all()
assert (load('return1.out.npy') == K).all()
def attention(offset):
    s = q @ K.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    i, j = np.arange(4)[:, None], np.arange(6)[None, :]
    s = np.where(j <= i + offset, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ V
got = load('return0.out.npy')
e = lambda want: np.max(np.abs(got - want) / (0.02 + np.abs(want)))
assert e(attention(2)) < 0.05, e(attention(2))
assert e(attention(0)) > 0.2, e(attention(0))
"#;
        let o = std::process::Command::new("python3").args(["-c", script, out.to_str().unwrap()]).output().unwrap();
        assert!(o.status.success(), "NumPy oracle on {device}: {}", text(&o));
    }
    // Pruning to more positions than the cache holds is an error at the prune.
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", "window", "--dims", "B=1,H=2,S=4,Dh=16,S_max=12"])
        .args(["--device", "interp", "--repeat", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("prune keeps the last 6 positions, but the cache holds 4"), "{}", text(&o));
}
