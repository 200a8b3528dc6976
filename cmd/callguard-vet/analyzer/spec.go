package analyzer

import (
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/callguard/callguard/spec"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// A spec file the analyzer can see: one named in a //callguard:spec
// comment (relative to the Go file's directory), or one a //go:embed
// directive puts in a variable that is passed to spec.Parse. It is read
// and linted by package spec itself (spec.Parse, then Spec.Chain), and
// its errors and findings are reported at the comment or the variable.

var specRe = regexp.MustCompile(`^//\s*callguard:spec\s+(\S+)(\s+//.*)?$`)

var embedRe = regexp.MustCompile(`^//go:embed\s+(\S+)\s*$`)

// specs lints the spec files of f.
func specs(pass *analysis.Pass, f *ast.File, ignores map[int][]ignore) {
	dir := filepath.Dir(pass.Fset.Position(f.Pos()).Filename)
	for _, g := range f.Comments {
		for _, c := range g.List {
			if m := specRe.FindStringSubmatch(c.Text); m != nil {
				lintSpec(pass, ignores, c.Pos(), filepath.Join(dir, m[1]), m[1])
			}
		}
	}
	// Variables with a //go:embed of one file, passed to spec.Parse.
	embedded := map[types.Object]struct {
		pos  token.Pos
		name string
	}{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			doc := vs.Doc
			if doc == nil && len(gd.Specs) == 1 {
				doc = gd.Doc
			}
			if doc == nil || len(vs.Names) != 1 {
				continue
			}
			for _, c := range doc.List {
				if m := embedRe.FindStringSubmatch(c.Text); m != nil && !strings.ContainsAny(m[1], "*?[") {
					embedded[pass.TypesInfo.Defs[vs.Names[0]]] = struct {
						pos  token.Pos
						name string
					}{vs.Names[0].Pos(), m[1]}
				}
			}
		}
	}
	if len(embedded) == 0 {
		return
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		fn, _ := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
		if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != modulePath+"/spec" || fn.Name() != "Parse" {
			return true
		}
		arg := ast.Unparen(call.Args[0])
		if conv, ok := arg.(*ast.CallExpr); ok && len(conv.Args) == 1 { // []byte(s)
			arg = ast.Unparen(conv.Args[0])
		}
		if id, ok := arg.(*ast.Ident); ok {
			if e, ok := embedded[pass.TypesInfo.Uses[id]]; ok {
				lintSpec(pass, ignores, e.pos, filepath.Join(dir, e.name), e.name)
				delete(embedded, pass.TypesInfo.Uses[id]) // once
			}
		}
		return true
	})
}

// lintSpec reads the spec at path and reports its errors and findings at
// pos.
func lintSpec(pass *analysis.Pass, ignores map[int][]ignore, pos token.Pos, path, name string) {
	data, err := os.ReadFile(path)
	if err != nil {
		report(pass, ignores, pos, "", "callguard:spec: "+err.Error())
		return
	}
	s, err := spec.Parse(data)
	if err != nil {
		report(pass, ignores, pos, "", "spec "+name+": "+err.Error())
		return
	}
	c, err := s.Chain()
	if err != nil {
		report(pass, ignores, pos, "", "spec "+name+": "+err.Error())
		return
	}
	for _, f := range c.Findings() {
		if !reported(f.Severity) {
			continue
		}
		report(pass, ignores, pos, f.Code, "spec "+name+": "+f.String())
	}
}
