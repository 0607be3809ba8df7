"""`foundry gc`: what nothing refers to any more, listed, sized and (with `apply`) deleted.

- `collect`: the command's steps; `refs`: what is kept and why; `scan`: where it looks; `items`: what it may delete
"""
