; Tessera locals, in nvim-treesitter's capture names: scopes, definitions and references
; (used by plugins that resolve names, e.g. nvim-treesitter-refactor; Neovim itself does
; not highlight with them). Helix's version is helix/locals.scm.
; ------------------------------------------------------------------ scopes

(module) @local.scope

(function_definition) @local.scope

; ------------------------------------------------------------------ definitions

(function_definition
  name: (identifier) @local.definition.function)

(parameters
  (identifier) @local.definition.parameter)

(typed_parameter
  name: (identifier) @local.definition.parameter)

(default_parameter
  name: (identifier) @local.definition.parameter)

(typed_default_parameter
  name: (identifier) @local.definition.parameter)

(assignment
  left: (identifier) @local.definition.var)

(assignment
  left: (pattern_list
    (identifier) @local.definition.var))

(assignment
  left: (tuple
    (identifier) @local.definition.var))

(for_statement
  left: (identifier) @local.definition.var)

(for_statement
  left: (pattern_list
    (identifier) @local.definition.var))

(for_statement
  left: (tuple
    (identifier) @local.definition.var))

(with_item
  alias: (identifier) @local.definition.var)

(aliased_import
  alias: (identifier) @local.definition.namespace)

(import_statement
  name: (dotted_name
    .
    (identifier) @local.definition.namespace))

(import_from_statement
  name: (dotted_name
    (identifier) @local.definition.import))

; ------------------------------------------------------------------ references

(identifier) @local.reference
