; Tessera injections (Neovim): comments are parsed with the `comment` grammar when it is
; installed (`TODO:`, `FIXME:`, URLs); without it, nothing changes.

((comment) @injection.content
  (#set! injection.language "comment"))
