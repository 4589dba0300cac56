; Matching brackets for Zed.
("(" @open ")" @close)
("[" @open "]" @close)
("{" @open "}" @close)
