//! Python's `//` and `%`, and the shifts `<<` and `>>` of integers, which every evaluator of Tessera code shares (the checker's constant
//! folding, the interpreters, the launch planner, and the CPU and PTX code generators in
//! their own instructions): the remainder takes the divisor's sign, so that with `//`
//! flooring, `a == (a // b) * b + a % b` for every sign (`-7 % 3 == 2`, `7 % -3 == -2`).

/// `a // b` of integers, for `b != 0`: the quotient rounded toward negative infinity
/// (`i64::MIN // -1` wraps to `i64::MIN`).
pub fn floor_div_i64(a: i64, b: i64) -> i64 {
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && (a < 0) != (b < 0) {
        q - 1
    } else {
        q
    }
}

/// `a % b` of integers, for `b != 0` (`i64::MIN % -1` is 0).
pub fn floor_rem_i64(a: i64, b: i64) -> i64 {
    let r = a.wrapping_rem(b);
    if r != 0 && (r < 0) != (b < 0) {
        r + b
    } else {
        r
    }
}

/// `a % b` of floats, as CPython computes it: `fmod`, moved into the divisor's sign,
/// and a zero remainder signed like the divisor. NaN for `b == 0` or an infinite `a`.
pub fn floor_rem_f64(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r == 0.0 {
        0f64.copysign(b)
    } else if (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

/// [`floor_rem_f64`] of f32 operands, rounded once to f32 (as the interpreter evaluates
/// f32 functions: `fmod` is exact either way, and the shift by `b` is rounded once).
pub fn floor_rem_f32(a: f32, b: f32) -> f32 {
    floor_rem_f64(a as f64, b as f64) as f32
}

/// `a << n` of a value held in 64 bits (narrower dtypes wrap after): an amount outside
/// `0..64` shifts every bit out, as PTX clamps its (unsigned) shift amounts and as the
/// LLVM backend selects. So `x << 40` of an i32 is 0, and a negative amount gives 0.
pub fn shl_i64(a: i64, n: i64) -> i64 {
    if (0..64).contains(&n) {
        a << n
    } else {
        0
    }
}

/// `a >> n`, arithmetic (every integer dtype is signed): an amount outside `0..64`
/// leaves the sign in every bit (0 or -1), as [`shl_i64`] clamps.
pub fn shr_i64(a: i64, n: i64) -> i64 {
    if (0..64).contains(&n) {
        a >> n
    } else {
        a >> 63
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remainder_takes_the_divisors_sign_as_in_python() {
        // (a, b, a % b) as Python computes them.
        for (a, b, r) in [(7, 3, 1), (-7, 3, 2), (7, -3, -2), (-7, -3, -1), (6, -3, 0), (i64::MIN, -1, 0)] {
            assert_eq!(floor_rem_i64(a, b), r, "{a} % {b}");
            // With `//` flooring: a == (a // b) * b + a % b.
            if b != -1 {
                assert_eq!(floor_div_i64(a, b), (a as f64 / b as f64).floor() as i64, "{a} // {b}");
                assert_eq!(floor_div_i64(a, b) * b + floor_rem_i64(a, b), a, "{a}, {b}");
            }
        }
        for (a, b, r) in [(7.5, 2.0, 1.5), (-7.5, 2.0, 0.5), (7.5, -2.0, -0.5), (-7.5, -2.0, -1.5)] {
            assert_eq!(floor_rem_f64(a, b), r, "{a} % {b}");
            assert_eq!(floor_rem_f32(a as f32, b as f32), r as f32, "{a} % {b}");
        }
        assert!(floor_rem_f64(6.0, -3.0) == 0.0 && floor_rem_f64(6.0, -3.0).is_sign_negative());
        assert!(floor_rem_f64(-6.0, 3.0) == 0.0 && floor_rem_f64(-6.0, 3.0).is_sign_positive());
        assert!(floor_rem_f64(1.0, 0.0).is_nan() && floor_rem_f64(f64::INFINITY, 2.0).is_nan());
    }

    #[test]
    fn shifts_past_the_width_shift_every_bit_out() {
        // Python's results within the width (`-20 >> 2 == -5`, `3 << 4 == 48`).
        assert_eq!((shl_i64(3, 4), shr_i64(-20, 2), shr_i64(20, 2)), (48, -5, 5));
        assert_eq!((shl_i64(1, 63), shl_i64(1, 64), shl_i64(5, -1)), (i64::MIN, 0, 0));
        assert_eq!((shr_i64(-5, 64), shr_i64(-5, -1), shr_i64(5, 70), shr_i64(i64::MIN, 63)), (-1, -1, 0, -1));
    }
}
