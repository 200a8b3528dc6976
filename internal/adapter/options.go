package adapter

import "fmt"

// Problems collects what is wrong with an adapter's options: the first
// invalid one, reported by the adapter's constructor, named. Its zero
// value needs Pkg set to the package's name ("grpcmw", "httpmw").
type Problems struct {
	Pkg string
	err error
}

// Fail records an invalid option, unless one was recorded before.
func (p *Problems) Fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf(p.Pkg+": "+format, args...)
	}
}

// Func records option(nil) as invalid when missing, and reports whether
// the function it takes is there.
func (p *Problems) Func(option string, missing bool) bool {
	if missing {
		p.Fail("%s(nil): needs a function", option)
	}
	return !missing
}

// Apply applies each option with apply, refusing a nil one, and returns
// the first problem.
func Apply[O any](p *Problems, opts []O, apply func(O)) error {
	for _, o := range opts {
		if any(o) == nil {
			return fmt.Errorf("%s: nil Option", p.Pkg)
		}
		apply(o)
	}
	return p.err
}
