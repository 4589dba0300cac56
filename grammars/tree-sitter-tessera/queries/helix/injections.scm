; Tessera injections (Helix): comments are highlighted by the `comment` grammar (`TODO:`,
; `FIXME:`, ...), as in Helix's own languages.

((comment) @injection.content
  (#set! injection.language "comment"))
