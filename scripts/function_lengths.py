#!/usr/bin/env python3
"""Lists functions longer than MIN lines (environment, default 100) under the given folders, longest first:
length, file, first line, declaration. Used for the architecture target "no function in src/ over 100 lines"."""
import re,sys,os
# Functions longer than MIN lines: a line at indent <= 4 ending in '{' whose declaration (joined back to the
# previous ';', '}' or blank line) has a parameter list and is not a namespace/class/struct/enum/initializer.
skip=re.compile(r'^\s*(namespace|struct|class|enum|union|extern|if|for|while|switch|else|do|template\s*<[^>]*>\s*(struct|class))\b')
res=[]
for root in sys.argv[1:]:
  for dp,dn,fn in os.walk(root):
    for f in fn:
      if not f.endswith(('.cpp','.h','.cu')): continue
      p=os.path.join(dp,f); L=open(p).read().split('\n')
      i=0
      while i<len(L):
        m=re.match(r'^\s*\S.*\{\s*$',L[i])
        if m and not L[i].rstrip().endswith('= {'):
          k=i; decl=[L[i]]
          while k>0 and not re.search(r'[;}{]\s*$|^\s*(public|private|protected):\s*$|^\s*$|^\s*//',L[k-1]) and len(decl)<6: k-=1; decl.insert(0,L[k])
          d=' '.join(x.strip() for x in decl)
          ind=re.match(r'^( *)',decl[0]).group(1)
          if len(ind)<=4 and '(' in d and not skip.match(decl[0]) and not re.search(r'\b(struct|class|enum)\s+\w+\s*(final)?\s*(:[^()]*)?\{$',d):
            j=i; depth=0
            while j<len(L):
              code=re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|//.*','',L[j])
              depth+=code.count('{')-code.count('}')
              if depth<=0: break
              j+=1
            res.append((j-k+1,p,k+1,d[:90])); i=j
        i+=1
res.sort(reverse=True)
for r in res:
  if r[0]>int(os.environ.get('MIN','100')): print(*r)
if os.environ.get('FAIL_IF_ANY') and any(r[0] > int(os.environ.get('MIN', '100')) for r in res):
  sys.exit(1)
