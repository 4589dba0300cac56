; Tessera locals, in Helix's captures: a reference that resolves to a definition takes the
; highlight named after `@local.definition.` (Helix 25.07+).
; ------------------------------------------------------------------ scopes

[
  (module)
  (function_definition)
] @local.scope

; ------------------------------------------------------------------ definitions

(function_definition
  name: (identifier) @local.definition.function)

(parameters
  (identifier) @local.definition.variable.parameter)

(typed_parameter
  name: (identifier) @local.definition.variable.parameter)

(default_parameter
  name: (identifier) @local.definition.variable.parameter)

(typed_default_parameter
  name: (identifier) @local.definition.variable.parameter)

(assignment
  left: (identifier) @local.definition.variable)

(assignment
  left: (pattern_list
    (identifier) @local.definition.variable))

(assignment
  left: (tuple
    (identifier) @local.definition.variable))

(for_statement
  left: (identifier) @local.definition.variable)

(for_statement
  left: (pattern_list
    (identifier) @local.definition.variable))

(for_statement
  left: (tuple
    (identifier) @local.definition.variable))

(with_item
  alias: (identifier) @local.definition.variable)

(import_statement
  name: (dotted_name
    .
    (identifier) @local.definition.namespace))

(aliased_import
  alias: (identifier) @local.definition.namespace)

; Names imported with `from m import a` are not definitions here: `f32` and `tile` keep the
; highlights of highlights.scm (a dtype, a built-in namespace).
; ------------------------------------------------------------------ references

(identifier) @local.reference

; Not references (discards, Helix after 25.07; ignored before): keyword argument names,
; fields, decorator names.
(keyword_argument
  name: (identifier) @_)

(attribute
  attribute: (identifier) @_)

(decorator
  (identifier) @_)
