//! Renders expressions back to source form for messages ("x is [B, S, D]").

use super::ast::*;

/// Renders `id` as Python-like source, shortened to about `max` chars.
pub fn render(body: &Body, id: ExprId, max: usize) -> String {
    let mut out = String::new();
    write_expr(body, id, &mut out, 0);
    if out.chars().count() > max {
        let cut: String = out.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        out
    }
}

fn write_expr(body: &Body, id: ExprId, out: &mut String, depth: u32) {
    if depth > 12 || out.len() > 400 {
        out.push('…');
        return;
    }
    let d = depth + 1;
    match body.expr(id) {
        Expr::Missing => out.push('?'),
        Expr::Name(n) => out.push_str(n),
        Expr::Int(v) => out.push_str(&v.to_string()),
        Expr::Float(f) => out.push_str(&format!("{:?}", f.get())),
        Expr::Str(s) => out.push_str(&format!("{s:?}")),
        Expr::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Expr::NoneLit => out.push_str("None"),
        Expr::Ellipsis => out.push_str("..."),
        Expr::Attribute { object, name, .. } => {
            write_expr(body, *object, out, d);
            out.push('.');
            out.push_str(name);
        }
        Expr::Subscript { value, indices } => {
            write_expr(body, *value, out, d);
            out.push('[');
            write_exprs(body, indices, out, d);
            out.push(']');
        }
        Expr::Slice { start, stop, step } => {
            if let Some(s) = start {
                write_expr(body, *s, out, d);
            }
            out.push(':');
            if let Some(s) = stop {
                write_expr(body, *s, out, d);
            }
            if let Some(s) = step {
                out.push(':');
                write_expr(body, *s, out, d);
            }
        }
        Expr::Call { func, args } => {
            write_expr(body, *func, out, d);
            out.push('(');
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                if let Some((n, _)) = &a.name {
                    out.push_str(n);
                    out.push('=');
                }
                write_expr(body, a.value, out, d);
            }
            out.push(')');
        }
        Expr::Binary { op, lhs, rhs } => {
            write_expr(body, *lhs, out, d);
            out.push(' ');
            out.push_str(op.symbol());
            out.push(' ');
            write_expr(body, *rhs, out, d);
        }
        Expr::Unary { op, operand } => {
            out.push_str(match op {
                UnaryOp::Neg => "-",
                UnaryOp::Pos => "+",
                UnaryOp::Invert => "~",
                UnaryOp::Not => "not ",
            });
            write_expr(body, *operand, out, d);
        }
        Expr::BoolOp { op, lhs, rhs } => {
            write_expr(body, *lhs, out, d);
            out.push_str(if *op == BoolOp::And { " and " } else { " or " });
            write_expr(body, *rhs, out, d);
        }
        Expr::Compare { op, lhs, rhs } => {
            write_expr(body, *lhs, out, d);
            out.push(' ');
            out.push_str(op.symbol());
            out.push(' ');
            write_expr(body, *rhs, out, d);
        }
        Expr::IfExpr { cond, then, otherwise } => {
            write_expr(body, *then, out, d);
            out.push_str(" if ");
            write_expr(body, *cond, out, d);
            out.push_str(" else ");
            write_expr(body, *otherwise, out, d);
        }
        Expr::Paren(inner) => {
            out.push('(');
            write_expr(body, *inner, out, d);
            out.push(')');
        }
        Expr::Tuple(items) => {
            out.push('(');
            write_exprs(body, items, out, d);
            if items.len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        Expr::List(items) => {
            out.push('[');
            write_exprs(body, items, out, d);
            out.push(']');
        }
        Expr::Dict(pairs) => {
            out.push('{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(body, *k, out, d);
                out.push_str(": ");
                write_expr(body, *v, out, d);
            }
            out.push('}');
        }
    }
}

/// `items` separated by ", " (subscripts, tuples, lists).
fn write_exprs(body: &Body, items: &[ExprId], out: &mut String, depth: u32) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_expr(body, *item, out, depth);
    }
}
