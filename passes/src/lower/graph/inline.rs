//! Inlining: a helper or graph function called from a graph function is lowered into the
//! caller's graph (its arguments bound to its parameters, its defaults evaluated in its
//! own scope, its dim symbols rewritten to the caller's dims).

use super::*;

impl<'f> Body<'_, '_, 'f> {
    /// Binds a callee's parameters to the call's arguments.
    pub(super) fn bind_arguments(
        &mut self,
        callee: &Callee,
        args: &[Arg],
        range: TextRange,
    ) -> R<HashMap<SmolStr, Val>> {
        let mut env = HashMap::new();
        let mut positional = args.iter().filter(|a| a.name.is_none());
        for p in &callee.sig.params {
            let given = if p.keyword_only {
                args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == p.name.as_str()))
            } else {
                args.iter()
                    .find(|a| a.name.as_ref().is_some_and(|(n, _)| n == p.name.as_str()))
                    .or_else(|| positional.next())
            };
            match given {
                Some(a) => {
                    let v = self.expr(a.value)?;
                    env.insert(SmolStr::new(&p.name), v);
                }
                None if p.has_default => {
                    // Defaults are constants the callee's own inference typed.
                    let dp = callee.def.params.iter().find(|dp| dp.name == p.name.as_str());
                    if let Some(default) = dp.and_then(|dp| dp.default) {
                        let v = self.in_callee(callee, HashMap::new(), BTreeMap::new()).expr(default)?;
                        env.insert(SmolStr::new(&p.name), v);
                    }
                }
                None => return unsupported(format!("no argument for `{}`", p.name), range),
            }
        }
        Ok(env)
    }

    pub(super) fn callee(&self, name: &str, range: TextRange) -> R<Callee> {
        if self.g.depth > 16 {
            return unsupported("graph functions call each other more than 16 deep (recursion?)", range);
        }
        let callee =
            (self.resolve)(name).ok_or_else(|| LowerError { message: format!("no function `{name}`"), range })?;
        if callee.is_kernel {
            return unsupported(format!("calling the kernel `{name}` from a graph function is not lowered yet"), range);
        }
        Ok(callee)
    }

    /// The callee's dim symbols that its arguments give other dims (see [`Body::dims`]).
    pub(super) fn callee_dims(&self, callee: &Callee, env: &HashMap<SmolStr, Val>) -> BTreeMap<String, Dim> {
        let mut dims = BTreeMap::new();
        for p in &callee.sig.params {
            let (Ty::Tensor(pt), Some(Val::One(v))) = (&p.ty, env.get(p.name.as_str())) else { continue };
            let Type::Tensor(at) = self.vty(*v) else { continue };
            for (pd, ad) in pt.dims.iter().zip(&at.dims) {
                if let Some(sym) = pd.as_sym().filter(|_| pd != ad) {
                    dims.entry(sym.to_string()).or_insert_with(|| ad.clone());
                }
            }
        }
        dims
    }

    /// Inlines a helper or graph function; returns its return value.
    pub(super) fn inline_call(&mut self, name: &str, args: &[Arg], range: TextRange) -> R<Val> {
        let callee = self.callee(name, range)?;
        let env = self.bind_arguments(&callee, args, range)?;
        self.inline_body(&callee, env, range)
    }

    /// A body lowering `callee`'s code into the same graph, with its own names.
    fn in_callee<'c>(
        &'c mut self,
        callee: &'c Callee,
        env: HashMap<SmolStr, Val>,
        dims: BTreeMap<String, Dim>,
    ) -> Body<'c, 'c, 'f> {
        Body {
            g: &mut *self.g,
            name: SmolStr::new(&callee.def.name),
            def: &callee.def,
            sig: &callee.sig,
            inf: &callee.inf,
            resolve: self.resolve,
            env,
            dims,
        }
    }

    /// Lowers `callee`'s body in place of a call at `at` (a range of this body). An error
    /// inside it is reported at `at`, naming the callee: the callee's own ranges count
    /// from its definition, not from the function being lowered. Through nested calls the
    /// names pile up innermost first: `... (in `inner`) (in `outer`)`.
    pub(super) fn inline_body(&mut self, callee: &Callee, env: HashMap<SmolStr, Val>, at: TextRange) -> R<Val> {
        let dims = self.callee_dims(callee, &env);
        self.g.depth += 1;
        let out = self.in_callee(callee, env, dims).stmts(&callee.def.body);
        self.g.depth -= 1;
        match out {
            Ok(v) => Ok(v.unwrap_or(Val::None)),
            Err(mut e) => {
                e.message = format!("{} (in `{}`)", e.message, callee.def.name);
                e.range = at;
                Err(e)
            }
        }
    }
}
