" Vim syntax file
" Language:	Tessera (.tsr), a tile-first GPU kernel language
" Used when tree-sitter is not available (Neovim 0.7/0.8, or no compiled parser).
" Group names end in Comment/String so that indent/python.vim (used by indent/tessera.vim)
" recognizes comments and strings.

if exists('b:current_syntax')
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

syn keyword tesseraStatement	return pass break continue
syn keyword tesseraConditional	if elif else
syn keyword tesseraRepeat	for while
syn keyword tesseraOperator	and or not in is
syn keyword tesseraInclude	import from
syn keyword tesseraStatement	with as
syn keyword tesseraDefine	def nextgroup=tesseraFunction skipwhite
syn match   tesseraFunction	'\h\w*' contained

syn keyword tesseraBoolean	True False
syn keyword tesseraConstant	None INF NAN

" Decorators: @kernel, @ts.kernel.autotune(...), @jit @autodiff
syn match   tesseraDecorator	'^\s*\zs@\s*\h\w*\%(\s*\.\s*\h\w*\)*' contains=tesseraDecoratorName
syn match   tesseraDecorator	'\%(^\s*@.*\s\)\@<=@\s*\h\w*\%(\s*\.\s*\h\w*\)*' contains=tesseraDecoratorName
syn match   tesseraDecoratorName	'\h\w*\%(\s*\.\s*\h\w*\)*' contained

" Types, dtypes and policies
" Matches, not keywords: a keyword would win over the tesseraTensorType region below.
syn match   tesseraType	'\<\%(Tensor\|KTile\|KVCache\|OptimizerState\|Schedule\|ShardSpec\)\>'
syn keyword tesseraDtype	f64 f32 tf32 bf16 f16 fp8_e4m3 fp8_e5m2 int8 int4 i32 i64 bool
syn keyword tesseraDtype	fp64 fp32 fp16 float64 float32 float16 bfloat16 int32 int64 e4m3 e5m2
syn match   tesseraScalarType	'\<\%(int\|float\)\>\%(\s*(\)\@!'
syn match   tesseraPolicy	'@\s*\%(accum\|stochastic_round\|loss_scale\|saturate\|fp32_master\|paged\|checkpointable\|rolling_window\|device\)\>'
syn region  tesseraTensorType	matchgroup=tesseraType start='\<\%(Tensor\|KTile\|KVCache\|OptimizerState\)\s*\[' end='\]' contains=tesseraAnyPolicy,tesseraDtype,tesseraString,tesseraNumber,tesseraNamespace,tesseraParens,tesseraComment transparent
syn match   tesseraAnyPolicy	'@\s*\h\w*' contained
syn region  tesseraParens	start='(' end=')' contained transparent contains=tesseraDtype,tesseraNumber,tesseraString

" Built-in namespaces and functions
syn match   tesseraNamespace	'\<\%(tile\|dist\|ts\|tessera\)\ze\s*\.'
syn match   tesseraIntrinsic	'\%(\<tile\s*\.\s*\)\@<=\%(context\|load\|store\|alloc_shared\|cp_async\|barrier\|zeros\|full\|arange\|dot\|mma\|transpose\|broadcast\|cast\|exp\|log\|sqrt\|rsqrt\|tanh\|sigmoid\|relu\|gelu\|silu\|maximum\|minimum\|where\|abs\|row_max\|row_sum\|sum\|max\|min\|causal_mask\|mask_causal\|softmax_online\|softmax_accumulate\|row_index\|col_index\|parallel\|range_n\|range\|program_id\|num_programs\|linear_id\)\>'
syn match   tesseraIntrinsic	'\%(\<dist\s*\.\s*\)\@<=\%(mesh\|tensor\|all_gather\|reduce_scatter\|all_reduce\)\>'
syn match   tesseraBuiltin	'\<\%(exp\|log\|tanh\|sqrt\|rsqrt\|sigmoid\|relu\|gelu\|silu\|abs\|neg\|maximum\|minimum\|pow\|matmul\|gemm\|sum\|mean\|max\|min\|softmax_safe\|logsumexp_safe\|layernorm_safe\|rmsnorm_safe\|transpose\|reshape\|concat\|split\|split_qkv\|merge_heads\|flash_attention\|dropout\|residual\|cast\|cast_like\|zeros\|ones\|full\|randn\|arange\|grad\|float\|int\|len\|range\|cdiv\|dict\|device\|prefetch\|block\)\ze\s*('

" Numbers: 42 0x2A 1_024 1.0 .5 1e-5
syn match   tesseraNumber	'\<0[xX]\%(_\=\x\)\+\>'
syn match   tesseraNumber	'\<0[bB]\%(_\=[01]\)\+\>'
syn match   tesseraNumber	'\<0[oO]\%(_\=\o\)\+\>'
syn match   tesseraNumber	'\<\d\%(_\=\d\)*\>'
syn match   tesseraFloat	'\<\d\%(_\=\d\)*\.\%(\d\%(_\=\d\)*\)\=\%([eE][+-]\=\d\%(_\=\d\)*\)\=\%(\W\|$\)\@='
syn match   tesseraFloat	'\%(^\|\W\)\@1<=\.\d\%(_\=\d\)*\%([eE][+-]\=\d\%(_\=\d\)*\)\=\>'
syn match   tesseraFloat	'\<\d\%(_\=\d\)*[eE][+-]\=\d\%(_\=\d\)*\>'

" Strings and comments
syn match   tesseraEscape	'\\\%([\\'"abfnrtv0]\|x\x\{2}\|u\x\{4}\|U\x\{8}\|\o\{1,3}\)' contained
syn region  tesseraString	start=+\<[rRbBfFuU]\{0,2}"""+ end=+"""+ keepend contains=tesseraEscape,@Spell
syn region  tesseraString	start=+\<[rRbBfFuU]\{0,2}'''+ end=+'''+ keepend contains=tesseraEscape,@Spell
syn region  tesseraString	start=+"""+ end=+"""+ keepend contains=tesseraEscape,@Spell
syn region  tesseraString	start=+'''+ end=+'''+ keepend contains=tesseraEscape,@Spell
syn region  tesseraString	start=+\<[rRbBfFuU]\{1,2}"+ skip=+\\\\\|\\"+ end=+"+ end=+$+ oneline contains=tesseraEscape
syn region  tesseraString	start=+\<[rRbBfFuU]\{1,2}'+ skip=+\\\\\|\\'+ end=+'+ end=+$+ oneline contains=tesseraEscape
syn region  tesseraString	start=+"\%(""\)\@!+ skip=+\\\\\|\\"+ end=+"+ end=+$+ oneline contains=tesseraEscape
syn region  tesseraString	start=+'\%(''\)\@!+ skip=+\\\\\|\\'+ end=+'+ end=+$+ oneline contains=tesseraEscape
syn keyword tesseraTodo	TODO FIXME XXX NOTE contained
syn match   tesseraComment	'#.*$' contains=tesseraTodo,@Spell

syn match   tesseraArrow	'->'

syn sync minlines=200

hi def link tesseraStatement	Statement
hi def link tesseraConditional	Conditional
hi def link tesseraRepeat	Repeat
hi def link tesseraOperator	Operator
hi def link tesseraInclude	Include
hi def link tesseraDefine	Define
hi def link tesseraFunction	Function
hi def link tesseraBoolean	Boolean
hi def link tesseraConstant	Constant
hi def link tesseraDecorator	PreProc
hi def link tesseraDecoratorName	PreProc
hi def link tesseraType	Type
hi def link tesseraDtype	Type
hi def link tesseraScalarType	Type
hi def link tesseraPolicy	StorageClass
hi def link tesseraAnyPolicy	StorageClass
hi def link tesseraNamespace	Include
hi def link tesseraIntrinsic	Function
hi def link tesseraBuiltin	Function
hi def link tesseraNumber	Number
hi def link tesseraFloat	Float
hi def link tesseraEscape	Special
hi def link tesseraString	String
hi def link tesseraTodo	Todo
hi def link tesseraComment	Comment
hi def link tesseraArrow	Operator

let b:current_syntax = 'tessera'

let &cpo = s:cpo_save
unlet s:cpo_save
