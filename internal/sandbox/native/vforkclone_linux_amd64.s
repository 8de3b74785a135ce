#include "textflag.h"

// func rawVfork(trap, a1, a2, a3 uintptr) (r1 uintptr, err syscall.Errno)
//
// A clone that shares this stack with the child (as syscall's
// rawVforkSyscall): the return address is kept in a register across the
// system call, since the child overwrites the stack below the caller's
// frame before the parent resumes.
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-48
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	a3+24(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	MOVQ	trap+0(FP), AX
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r1+32(FP)
	NEGQ	AX
	MOVQ	AX, err+40(FP)
	RET
ok:
	MOVQ	AX, r1+32(FP)
	MOVQ	$0, err+40(FP)
	RET
