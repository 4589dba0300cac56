//! NumPy `.npy` files (format versions 1.0 and 2.0; 3.0 is read too) for `tessera run
//! --save`: little-endian `<f4 <f8 <f2 <i4 <i8 |i1 |b1`, C order. Dtypes NumPy has no
//! type for are widened, and [`write`] says so: bf16, tf32 and both fp8 formats are
//! saved as float32 (exactly: every such value is an f32), int4 as int8.

use std::io::{self, Read};
use std::path::Path;

use tessera_frontend::check::DType;

use crate::tensor::HostTensor;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The NumPy type a dtype is saved as, and whether that widens it.
fn descr(dtype: DType) -> (&'static str, DType, bool) {
    match dtype {
        DType::F64 => ("<f8", DType::F64, false),
        DType::F32 => ("<f4", DType::F32, false),
        DType::F16 => ("<f2", DType::F16, false),
        DType::I32 => ("<i4", DType::I32, false),
        DType::I64 => ("<i8", DType::I64, false),
        DType::Int8 => ("|i1", DType::Int8, false),
        DType::Bool => ("|b1", DType::Bool, false),
        DType::BF16 | DType::TF32 | DType::Fp8E4m3 | DType::Fp8E5m2 => ("<f4", DType::F32, true),
        DType::Int4 => ("|i1", DType::Int8, true),
    }
}

fn dtype_of_descr(d: &str) -> Option<DType> {
    Some(match d {
        "<f8" => DType::F64,
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        "<i4" => DType::I32,
        "<i8" => DType::I64,
        "|i1" | "<i1" => DType::Int8,
        "|b1" | "<b1" => DType::Bool,
        _ => return None,
    })
}

/// The bytes of a `.npy` file holding `t`, and a note when its dtype was widened.
pub fn to_bytes(t: &HostTensor) -> (Vec<u8>, Option<String>) {
    let (descr, stored, widened) = descr(t.dtype);
    let shape = match t.dims.as_slice() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!("({})", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Version 1.0 has a 2-byte header length; 2.0 a 4-byte one for larger headers. The
    // whole preamble is padded with spaces to a multiple of 64 bytes, ending in '\n'.
    let (version, len_bytes) = if header.len() + 1 + 10 > u16::MAX as usize { (2u8, 4) } else { (1u8, 2) };
    let preamble = MAGIC.len() + 2 + len_bytes;
    let total = (preamble + header.len() + 1).div_ceil(64) * 64;
    header.extend(std::iter::repeat_n(' ', total - preamble - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + t.numel() * 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if len_bytes == 2 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    if widened {
        let wide = HostTensor::from_f64(stored, &t.dims, &t.to_f64());
        out.extend_from_slice(&wide.data);
    } else {
        out.extend_from_slice(&t.data);
    }
    let note = widened.then(|| format!("{} has no NumPy dtype: saved as {} (exactly)", t.dtype, stored));
    (out, note)
}

/// Writes `t` to `path` as `.npy`; returns a note when the dtype was widened.
pub fn write(path: &Path, t: &HostTensor) -> io::Result<Option<String>> {
    let (bytes, note) = to_bytes(t);
    crate::files::write_atomic(path, &bytes)?;
    Ok(note)
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Parses a `.npy` file's bytes.
pub fn from_bytes(bytes: &[u8]) -> io::Result<HostTensor> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("not a .npy file (no \\x93NUMPY magic)"));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad("truncated .npy header"));
            }
            (u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize, 12)
        }
        _ => return Err(bad(format!(".npy format version {major}.{minor} is not supported"))),
    };
    let header = bytes.get(start..start + len).ok_or_else(|| bad("truncated .npy header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("the .npy header is not text"))?;
    let descr = dict_value(header, "descr")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let dtype = dtype_of_descr(descr).ok_or_else(|| {
        bad(format!("dtype '{descr}' is not supported (little-endian <f4 <f8 <f2 <i4 <i8 |i1 |b1 are)"))
    })?;
    if dict_value(header, "fortran_order")?.trim() != "False" {
        return Err(bad("Fortran-order arrays are not supported"));
    }
    let shape = dict_value(header, "shape")?;
    let dims = shape
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad(format!("bad shape entry `{s}`"))))
        .collect::<io::Result<Vec<usize>>>()?;
    let data = &bytes[start + len..];
    let n: usize = dims.iter().product();
    let want = n * dtype.bytes() as usize;
    if data.len() < want {
        return Err(bad(format!("the array needs {want} bytes of data, the file has {}", data.len())));
    }
    Ok(HostTensor { dtype, dims, data: data[..want].to_vec() })
}

pub fn read(path: &Path) -> io::Result<HostTensor> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    from_bytes(&bytes)
}

/// The text of `key`'s value in the header dict (up to the next top-level comma).
fn dict_value<'h>(header: &'h str, key: &str) -> io::Result<&'h str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))
        .ok_or_else(|| bad(format!("the .npy header has no `{key}`")))?;
    let rest = &header[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':').ok_or_else(|| bad("malformed .npy header"))?.trim_start();
    let mut depth = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Ok(&rest[..i]),
            _ => {}
        }
    }
    Err(bad("malformed .npy header"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_aligned_and_parse_back() {
        for dims in [vec![], vec![5], vec![2, 3], vec![1, 2, 3, 4]] {
            let n: usize = dims.iter().product();
            let t = HostTensor::from_f64(DType::F32, &dims, &(0..n).map(|i| i as f64 * 0.5).collect::<Vec<_>>());
            let (bytes, note) = to_bytes(&t);
            assert!(note.is_none());
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + header_len) % 64, 0);
            assert_eq!(bytes[10 + header_len - 1], b'\n');
            assert_eq!(from_bytes(&bytes).unwrap(), t);
        }
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(from_bytes(b"hello").is_err());
        let t = HostTensor::from_f64(DType::I32, &[2], &[1.0, 2.0]);
        let (mut bytes, _) = to_bytes(&t);
        bytes.truncate(bytes.len() - 1);
        assert!(from_bytes(&bytes).unwrap_err().to_string().contains("needs 8 bytes"));
        let mut big_endian = to_bytes(&t).0;
        let at = big_endian.windows(3).position(|w| w == b"<i4").unwrap();
        big_endian[at] = b'>';
        assert!(from_bytes(&big_endian).unwrap_err().to_string().contains("not supported"));
    }
}
