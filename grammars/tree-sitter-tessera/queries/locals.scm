; Tessera locals: scopes, definitions and references (Neovim and Helix).

; ------------------------------------------------------------------ scopes

(module) @local.scope

(function_definition) @local.scope

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
