" Tessera indentation is Python's: indent after a line ending in ':', dedent after return,
" pass, break and continue, and line up continuation lines inside brackets. Python's indent
" script recognizes strings and comments by syntax group names ending in String/Comment,
" which syntax/tessera.vim follows.
if exists('b:did_indent')
  finish
endif
runtime! indent/python.vim
