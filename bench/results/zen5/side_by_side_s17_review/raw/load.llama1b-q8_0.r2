 19:44:45 up  2:09,  0 user,  load average: 2.06, 1.88, 1.50
