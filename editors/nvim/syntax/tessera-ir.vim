" Vim syntax file
" Language:	Tessera IR (the text of `tessera lower` / :TesseraLower)

if exists('b:current_syntax')
  finish
endif

syn match   tesseraIrComment	'//.*$'
syn region  tesseraIrLoc	start='\<loc(' end=')' contains=tesseraIrString
syn region  tesseraIrString	start=+"+ skip=+\\\\\|\\"+ end=+"+ oneline
syn match   tesseraIrValue	'%[[:alnum:]_.$#-]\+'
syn match   tesseraIrSymbol	'@[[:alnum:]_.$-]\+'
syn match   tesseraIrLabel	'\^[[:alnum:]_.$-]\+'
syn match   tesseraIrOp	'\<\l[[:alnum:]_$]*\%(\.\l[[:alnum:]_$]*\)\+\>'
syn match   tesseraIrType	'\<\%(tile\|tensor\|memref\|vector\|smem\|shared\|ptr\)\ze<'
syn match   tesseraIrDtype	'\%(\<\|\d\+x\)\@<=\%(f64\|f32\|tf32\|bf16\|f16\|fp8_e4m3\|fp8_e5m2\|i1\|i4\|i8\|i16\|i32\|i64\|index\)\>'
syn match   tesseraIrNumber	'-\=\<\d\+\%(\.\d*\)\=\%([eE][+-]\=\d\+\)\=\>'
syn keyword tesseraIrKeyword	func module return yield

hi def link tesseraIrComment	Comment
hi def link tesseraIrLoc	Comment
hi def link tesseraIrString	String
hi def link tesseraIrValue	Identifier
hi def link tesseraIrSymbol	Function
hi def link tesseraIrLabel	Label
hi def link tesseraIrOp	Statement
hi def link tesseraIrType	Type
hi def link tesseraIrDtype	Type
hi def link tesseraIrNumber	Number
hi def link tesseraIrKeyword	Keyword

let b:current_syntax = 'tessera-ir'
